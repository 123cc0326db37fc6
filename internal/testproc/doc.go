// Package testproc starts the running test binary again as a child process,
// for the tests of this module that need real OS processes: several
// processes sharing a store, a worker killed with SIGKILL or stopped with
// SIGSTOP, a process running as another user. It is the one place that
// knows how a child is selected, started, read and cleaned up.
//
// A child runs either a function or a test. For a function, the package's
// TestMain calls [Main] first thing with the functions its children may
// run; [Start] and [Run] name one, with its arguments, and the child runs
// it instead of the tests and exits with its code. For a test
// ([Options.Test]), the child runs that one test, which asks [Name] whether
// it is the child and, if so, plays its part and returns. Children say
// what they did on stdout, one line per event; the parent reads the lines
// with [Proc.Next] and [Proc.Lines], or takes the whole output from [Run].
//
// # Guarantees
//
// Every child runs in a process group of its own, and the test's cleanup
// SIGKILLs that group and waits for the child, so that no child outlives
// its test (TestCleanupKillsTheProcessGroup). A child runs the function
// Main or Register names, with the parent's arguments and environment
// added (TestFunctionArgsAndLines, TestRegisteredFunction,
// TestEnvAddsToTheChildsEnvironment), or the one test Options.Test names
// (TestChildRunsATest); Run returns its output and exit status, and ends
// with ctx (TestRunReturnsOutputAndExit, TestRunEndsWithCtx). Stop
// returns only once the child is stopped, not merely signalled
// (TestStopReturnsOnceStopped). MainRoles hands every other name to one
// function of roles, so a package lists its roles once, where they are
// played (TestMainRolesHandsOtherNamesToRoles).
//
// # Caveats
//
// A process that a child moves to another group or session (as execjob
// does for the programs it runs) is not in its group and is not killed.
// Next waits a minute at most for a line, and Lines a minute at most for
// the exit of a child whose stdout has closed; a slower child fails the
// test.
//
// The privilege drop is beside it: [Unprivileged] makes a copy of the test
// binary that every user can run, [User] makes sure a test user exists in
// the groups a test needs (the jobdir-test-alice and jobdir-test-bob users
// of the jobdir-test-team group, for instance), and [Options.Cred] runs a
// child as that user (TestChildAsNobody). Both skip the test where they
// cannot work (not root, no useradd, a temporary directory other users
// cannot search).
//
// A child can be a process of a container: [Options.PIDNamespace] starts
// it as PID 1 of a PID namespace of its own, with a mount namespace of its
// own whose /proc shows that namespace (what `unshare --pid --fork
// --mount-proc` makes), so that every such child has PID 1, as every
// jobdir process on a node of containers does
// (TestPIDNamespaceChildIsPID1); [PIDNamespaceCmd] does the same for a
// program other than the test binary, which keeps the PID the parent sees
// (TestPIDNamespaceCmd). Main mounts the child's /proc, then takes on
// Options.Cred if set. [RequirePIDNamespaces] skips a test, with the
// reason, where the machine does not allow new namespaces (not root, not
// Linux, a sandbox that refuses).
//
// # Where the multi-process tests live
//
// Each package's multi-process tests sit beside the package whose promise
// they prove, and use this package:
//
//   - filestore/multiproc_test.go: processes sharing one store directory
//     (claims, keys, kills, stops, cancels and waits across processes), with
//     more in leasefile_test.go, listmoves_test.go, rollback_test.go and
//     stall_test.go, processes running as other users in
//     hostile_test.go, trust_test.go and diskfull_linux_test.go, and
//     processes that are each PID 1 of their own PID namespace in
//     pidns_test.go;
//   - pgstore/multiproc_test.go: the same promises for pgstore;
//   - runner/internal/multiproc: worker processes running runner.Runner on
//     one filestore (kept apart so that package runner's own tests depend
//     on memstore only);
//   - httpapi/filestore_test.go: a wait served over HTTP that another
//     process ends;
//   - execjob/tree_linux_test.go: workers killed with their jobs' process
//     trees;
//   - jobstore/storetest: the conformance suite run against broken stores
//     in a child, so that its failures do not fail the parent;
//   - cmd/jobdir: the jobdir binary itself, end to end (e2e_test.go,
//     security_test.go);
//   - internal/waitstorm: the worker process of the wait-storm benchmarks
//     of filestore and httpapi;
//   - internal/torture and cmd/jobdir-torture: the torture run, whose
//     children are part of the command (torture.IsChild and
//     torture.ChildMain), not a test harness; likewise the side-by-side
//     benchmark command in bench/, a module of its own.
package testproc
