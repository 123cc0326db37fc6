package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/internal/humantime"
	"github.com/jobdir/jobdir/jobstore"
)

func (a *app) queueCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "List, pause and resume queues",
		Long: `Every job is in a queue: the one its submit named (--queue), or the queue
named default. A queue exists once a job or a setting names it.

"jobdir queue list" shows each queue, whether it is paused, and how many of its
jobs wait and run. "jobdir queue pause Q" stops every worker, in every process
on the store, from starting jobs of Q: once the command returns, no job of Q
starts until "jobdir queue resume Q". Jobs of Q that run go on, and submits to
Q are accepted; they wait. After a resume, waiting workers start Q's due jobs
at once.

"jobdir queue limit Q N" lets at most N jobs of Q run at once, in every process
on the store together, however many workers they have; claims pass over Q's
jobs while N run and take other queues' jobs. "jobdir queue limit Q
--per-partition M" lets at most M jobs of each partition of Q run at once (a
job's partition is what "jobdir submit --partition" gave it), and "jobdir
queue limit Q --rate 100/1m" lets at most 100 jobs of Q start in any minute.

A pause and a limit are kept in the store: they hold across restarts, and every
process sees them, including those that start later.`,
		Example: `  jobdir queue list
  jobdir queue pause emails     # the mail provider is down
  jobdir queue resume emails
  jobdir queue limit deploys 2  # at most 2 deploys at once
  jobdir queue list --json | jq '.[] | select(.paused) | .queue'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(a.queueListCommand(), a.queuePauseCommand(true), a.queuePauseCommand(false), a.queueLimitCommand())
	return cmd
}

func (a *app) queueListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the queues, with their settings and jobs",
		Long: `List every queue that has jobs or settings: its name, whether it is paused,
its concurrency limit, per-partition limit and rate limit (-: none), how many
of its jobs are queued and running, and how long its longest-waiting due job
has waited. With --json, an array of objects with the fields queue, paused,
limit and per_partition (0: none), rate (such as "20/1s", absent for none),
queued, running and oldest_due_at (as GET /v1/queues sends them).`,
		Example: `  jobdir queue list
  jobdir queue list --json | jq -r '.[] | select(.paused) | .queue'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				qc, err := queueController(st)
				if err != nil {
					return err
				}
				qs, err := qc.Queues(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(a.stdout, httpapi.QueuesResponse{Queues: qs}.Queues)
				}
				return printQueues(a.stdout, qs, time.Now())
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the queues as JSON")
	return cmd
}

func (a *app) queuePauseCommand(pause bool) *cobra.Command {
	use, short, done := "resume QUEUE", "Let the workers start a queue's jobs again", "resumed"
	long := `Let the workers of every process start the jobs of a paused queue again. The
workers that wait for work start its due jobs at once. Resuming a queue that
is not paused changes nothing.`
	example := `  jobdir queue resume emails`
	if pause {
		use, short, done = "pause QUEUE", "Stop the workers, in every process, from starting a queue's jobs", "paused"
		long = `Stop every worker, in every process on the store, from starting jobs of
QUEUE: once this command returns, none starts until "jobdir queue resume".
Jobs of QUEUE that run go on, and submits to it are accepted: they wait. The
pause is kept in the store, for the workers that start later too. Any queue
name may be paused, whether or not a job names it yet.`
		example = `  jobdir queue pause emails
  jobdir queue pause deploys && ./maintenance.sh; jobdir queue resume deploys`
	}
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("%s needs one QUEUE, the name of the queue", cmd.Name())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := jobstore.ValidateQueue(q); err != nil {
				return usagef("%v", err)
			}
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				qc, err := queueController(st)
				if err != nil {
					return err
				}
				change := qc.ResumeQueue
				if pause {
					change = qc.PauseQueue
				}
				if err := change(cmd.Context(), q); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "queue %s %s\n", q, done)
				return nil
			})
		},
	}
}

func (a *app) queueLimitCommand() *cobra.Command {
	var unlimited bool
	var perPartition int
	var rateText string
	cmd := &cobra.Command{
		Use:   "limit QUEUE [N | --unlimited] [--per-partition M] [--rate N/DURATION | --rate off]",
		Short: "Bound how many jobs of a queue run at once, or of each of its partitions, or start in a while, in every process together",
		Long: `Let at most N jobs of QUEUE run at once, in every process on the store together,
however many workers they have. Claims pass over QUEUE's jobs while N of them
run, and take the jobs of other queues instead; when one of them ends (or its
worker dies), a waiting worker starts the next at once. N 0 or --unlimited
removes the limit.

--per-partition M lets at most M jobs of each partition of QUEUE run at once
(a job's partition is what its submit gave with --partition, a customer's ID,
say); M 1 runs the jobs of each partition one after another, in the order
they would be claimed, while different partitions run side by side. Jobs
without a partition are bounded by N only. --per-partition 0 removes it.

--rate R lets at most R's N jobs of QUEUE start in any window of R's
DURATION (a sliding window, not fixed buckets), in every process together:
--rate 100/1m, --rate 20/1s (or 20/s). Workers that find the window full
take other queues' jobs, and wait for the moment the next start is allowed.
A start counts whatever the attempt's outcome. --rate off removes it.

Each setting is changed on its own: "limit Q 5" leaves Q's per-partition
limit and rate as they were, and "limit Q --per-partition 1" leaves N. A job
starts only when every one of them has room.

A limit lowered below the jobs that run lets them finish, and starts none until
fewer run. A job counts from its claim until its attempt is over. On a file
store that is every process of it gone, so a job whose worker was killed
counts until the processes it started are gone too, and a worker that is
stopped (SIGSTOP) keeps its jobs, and so their places. In PostgreSQL it is
the end of its worker's lease: about a second after the worker died, or the
lease's TTL (30s) after it stopped.`,
		Example: `  jobdir queue limit deploys 2
  jobdir queue limit --unlimited deploys
  jobdir queue limit emails --per-partition 1   # one job per customer at a time
  jobdir submit --queue emails --partition customer-42 -- ./send-digest.sh 42
  jobdir queue limit emails --rate 100/1m       # the provider takes 100 a minute
  jobdir queue limit emails --rate off`,
		Args: func(cmd *cobra.Command, args []string) error {
			other := cmd.Flags().Changed("per-partition") || cmd.Flags().Changed("rate")
			switch {
			case len(args) == 0 || len(args) > 2:
				return usagef("limit needs a QUEUE, then a number N, --unlimited, --per-partition M or --rate N/DURATION")
			case unlimited && len(args) == 2:
				return usagef("give either a number N or --unlimited, not both")
			case len(args) == 1 && !unlimited && !other:
				return usagef("limit %s needs a number N, --unlimited, --per-partition M or --rate N/DURATION", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := jobstore.ValidateQueue(q); err != nil {
				return usagef("%v", err)
			}
			setQueue := unlimited || len(args) == 2
			setPer := cmd.Flags().Changed("per-partition")
			n := 0
			if len(args) == 2 {
				var err error
				if n, err = strconv.Atoi(args[1]); err != nil {
					return usagef("limit %q is not a whole number (0 or --unlimited: no limit)", args[1])
				}
				if err := jobstore.ValidateQueueLimit(n); err != nil {
					return usagef("%v", err)
				}
			}
			if setPer {
				if err := jobstore.ValidateQueueLimit(perPartition); err != nil {
					return usagef("--per-partition: %v", err)
				}
			}
			setRate := cmd.Flags().Changed("rate")
			var rate jobstore.Rate
			if setRate && rateText != "off" {
				var err error
				if rate, err = jobstore.ParseRate(rateText); err != nil {
					return usagef("--rate: %v (or off: no rate limit)", err)
				}
			}
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				ql, ok := st.Store.(jobstore.QueueLimiter)
				if !ok {
					return fmt.Errorf("the store %s does not limit queues", st.name)
				}
				if setQueue {
					if err := ql.SetQueueLimit(cmd.Context(), q, n); err != nil {
						return err
					}
					if n == 0 {
						fmt.Fprintf(a.stdout, "queue %s has no limit\n", q)
					} else {
						fmt.Fprintf(a.stdout, "queue %s runs at most %d at once\n", q, n)
					}
				}
				if setPer {
					if err := ql.SetPartitionLimit(cmd.Context(), q, perPartition); err != nil {
						return err
					}
					switch perPartition {
					case 0:
						fmt.Fprintf(a.stdout, "queue %s has no per-partition limit\n", q)
					case 1:
						fmt.Fprintf(a.stdout, "queue %s runs the jobs of each partition one at a time\n", q)
					default:
						fmt.Fprintf(a.stdout, "queue %s runs at most %d jobs of each partition at once\n", q, perPartition)
					}
				}
				if setRate {
					if err := ql.SetQueueRate(cmd.Context(), q, rate); err != nil {
						return err
					}
					if rate.IsZero() {
						fmt.Fprintf(a.stdout, "queue %s has no rate limit\n", q)
					} else {
						fmt.Fprintf(a.stdout, "queue %s starts at most %d jobs in any window of %s\n", q, rate.N, humantime.Duration(rate.Per))
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&unlimited, "unlimited", false, "remove the queue's limit")
	cmd.Flags().IntVar(&perPartition, "per-partition", 0, "the most jobs of each partition of the queue that run at once (0: no such limit)")
	cmd.Flags().StringVar(&rateText, "rate", "", "the most jobs of the queue that start in any window of a length, as N/DURATION: 100/1m, 20/s (off: no rate limit)")
	return cmd
}

// queueController returns the store's queue settings, or says in plain
// words that it keeps none.
func queueController(st *cliStore) (jobstore.QueueController, error) {
	qc, ok := st.Store.(jobstore.QueueController)
	if !ok {
		return nil, fmt.Errorf("the store %s keeps no queue settings", st.name)
	}
	return qc, nil
}

// limitWord is a limit in queue list: "-" for none.
func limitWord(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// printQueues writes qs for people.
func printQueues(w io.Writer, qs []jobstore.QueueInfo, now time.Time) error {
	if len(qs) == 0 {
		_, err := fmt.Fprintln(w, `No queues yet: a queue exists once a job is submitted to it ("jobdir submit --queue Q").`)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tSTATE\tLIMIT\tPER PARTITION\tRATE\tQUEUED\tRUNNING\tOLDEST WAIT")
	for _, q := range qs {
		state := "running"
		if q.Paused {
			state = "paused"
		}
		oldest := "-"
		if !q.OldestDueAt.IsZero() {
			oldest = humantime.Duration(max(now.Sub(q.OldestDueAt), 0))
		}
		rate := "-"
		if !q.Rate.IsZero() {
			rate = q.Rate.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", q.Queue, state, limitWord(q.Limit), limitWord(q.PerPartition), rate, q.Queued, q.Running, oldest)
	}
	return tw.Flush()
}
