//go:build unix && !linux && !darwin

package engine

import "errors"

// awaitExit cannot wait without reaping here: Wait then reaps at once and does not signal the
// group after the exit (its id may be reused); grandchildren are not killed, and the pipes
// they hold are closed after the grace all the same.
func awaitExit(int) error { return errors.ErrUnsupported }
