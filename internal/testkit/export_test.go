package testkit

// What proc_test.go checks of Proc.Stop from outside the package.
var (
	ErrProcKilled = errProcKilled
	Descendants   = descendants
)
