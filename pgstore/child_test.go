package pgstore_test

// childEnv, when set, makes the test binary a child process in the role it
// names.
const childEnv = "PGSTORE_TEST_CHILD"

func runChild(role string) int { return 2 }
