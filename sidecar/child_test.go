package sidecar_test

// childEnv makes the test binary play `millrace sidecar` for measurements in a child process.
const childEnv = "MILLRACE_SIDECAR_TEST_CHILD"

func runChild() int { return 0 }
