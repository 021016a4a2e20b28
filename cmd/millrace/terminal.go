package main

import "os"

// isTerminal reports whether w (a reader or writer) is a terminal (a character device): for
// output meant for a person (progress lines, a final newline), or input typed by one.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
