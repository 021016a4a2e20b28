package conformance

// The check names, their list and the sentinel errors, for the tests.
const (
	CheckReady       = checkReady
	CheckFraming     = checkFraming
	CheckStdout      = checkStdout
	CheckAnswers     = checkAnswers
	CheckUnknownKeys = checkUnknownKeys
	CheckOutputs     = checkOutputs
	CheckSilence     = checkSilence
	CheckConfig      = checkConfig
	CheckNonASCII    = checkNonASCII
	CheckLarge       = checkLarge
	CheckBurst       = checkBurst
	CheckConcurrent  = checkConcurrent
	CheckCancel      = checkCancel
	CheckBatch       = checkBatch
	CheckState       = checkState
	CheckStderr      = checkStderr
	CheckShutdown    = checkShutdown

	FixtureTopic = fixtureTopic
)

var (
	Checks     = checkList
	ErrAction  = errAction
	ErrFixture = errFixture
)
