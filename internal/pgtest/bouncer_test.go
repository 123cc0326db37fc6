package pgtest_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobdir/jobdir/internal/pgtest"
)

// backendPIDs returns the server backend of each of n statements that
// clients run through dsn, each on a connection of its own that stays open
// (so that a pooler cannot hand them all one server) but outside a
// transaction.
func backendPIDs(t *testing.T, dsn string, n int) []uint32 {
	t.Helper()
	var pids []uint32
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		c, err := pgx.Connect(t.Context(), dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(t.Context()) })
		conns[i] = c
	}
	for _, c := range conns {
		var pid uint32
		require.NoError(t, c.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid))
		pids = append(pids, pid)
	}
	return pids
}

func TestBouncerTransactionModeSharesServers(t *testing.T) {
	// pgx's cached prepared statements would collide on the one server.
	dsn := pgtest.Bouncer(t, pgtest.BouncerOptions{PoolMode: "transaction", PoolSize: 1}) + " default_query_exec_mode=exec"
	pids := backendPIDs(t, dsn, 3)
	// One server connection for three clients: each statement ran on it.
	require.Equal(t, []uint32{pids[0], pids[0], pids[0]}, pids)
}

func TestBouncerSessionModeKeepsServers(t *testing.T) {
	dsn := pgtest.Bouncer(t, pgtest.BouncerOptions{PoolMode: "session", PoolSize: 3})
	pids := backendPIDs(t, dsn, 3)
	require.Len(t, map[uint32]bool{pids[0]: true, pids[1]: true, pids[2]: true}, 3, "each client has a server of its own: %v", pids)
}
