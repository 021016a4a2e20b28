package local

// For the external tests: the input-line parser the fuzz test drives and the errors of Run
// that cmd/millrace does not match.
var (
	Record     = parseRecord
	ErrInput   = errInput
	ErrStalled = errStalled
	ErrRefused = errRefused
)
