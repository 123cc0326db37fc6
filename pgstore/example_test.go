package pgstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobdir/jobdir/jobstore"
	"github.com/jobdir/jobdir/pgstore"
)

// A store in PostgreSQL, shared by every process on every machine that
// opens the same schema; a job can be submitted in the program's own
// transaction, so that it exists if and only if that transaction commits.
// (Not run as a test: it needs a server.)
func ExampleStore_SubmitTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.Open(ctx, pool, &pgstore.Options{Schema: "jobdir"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, "o-1"); err != nil {
		log.Fatal(err)
	}
	job, _, err := store.SubmitTx(ctx, tx, jobstore.Spec{Kind: "order.ship", Key: "ship-o-1"})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err) // neither the order nor its job exists
	}
	fmt.Println("submitted", job.ID)
}
