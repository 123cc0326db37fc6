package filestore

// childEnv names the environment variable that turns the test binary into
// a child process of a multi-process test; its value selects the role.
const childEnv = "FILESTORE_TEST_CHILD"

func runChild(role string) int { return 2 }
