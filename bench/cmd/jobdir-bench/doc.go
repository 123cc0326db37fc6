// Command jobdir-bench runs jobdir's stores and two embedded SQLite job
// queues side by side on one disk and reports how they compare.
//
// The contenders are jobdir's file store (durable, and without fsync),
// jobdir's in-memory store, River with its SQLite driver and goqite, each
// of the SQLite peers with synchronous=FULL (durable) and NORMAL, all in WAL
// mode through the pure-Go modernc.org/sqlite driver. The workloads are
// those of the project's performance issue: inserts from 1 and 16 clients,
// batch inserts, working off N no-op jobs with W workers in 1 and 2
// processes, submit-to-handler latency across processes (idle and under a
// steady load), cross-process cancel and SIGKILL recovery (jobdir only),
// the scaling of get, claim+complete, list, open time and peak RSS with the
// number of jobs in the store, jobdir's own commands (get, cancel, wait,
// logs, submit), each a whole process, on stores of 1,000 and 100,000
// jobs (file store and pgstore), and the file system's own floor: durable
// file creates per second from 1 and 4 writers. Beside each throughput
// figure it reports the CPU time (user+sys, getrusage) that the processes
// doing the work spent per 1,000 jobs over the same interval.
//
// Usage:
//
//	jobdir-bench [-quick] [-rounds 3] [-jobs 2000] [-workers 1,10,100] [-workoff-limit 15s]
//	             [-only insert,batch,workoff,latency,cancel,kill,scale,cli,floor]
//	             [-systems jobdir-file,river-full,...] [-dir /tmp] [-out bench-results]
//
// Workloads that need several processes re-execute this binary as child
// processes; the environment variable JOBDIR_BENCH_CHILD tells a child what
// part to play. The table (medians over the rounds, with min–max) goes to
// stdout and -out/results.md, the raw figures to -out/results.json, and a
// chart of work-off throughput against workers to -out/workoff.svg.
//
// # Caveats
//
// The figures measure one machine at one time; only figures from the same
// run are comparable, which is why the floor is measured in that run. The
// benchmark needs a local file system for jobdir's file store (Linux), and
// about 25-30 minutes on 2 cores without -quick.
package main
