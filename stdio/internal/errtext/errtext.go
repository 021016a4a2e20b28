// Package errtext writes the parts of the wire's and the engine's error messages that quote a
// line or name a size, so both say them the same way.
package errtext

import "strconv"

// Size names a byte count: "8 MiB" for whole mebibytes, else "N bytes".
func Size(n int) string {
	if n%(1<<20) == 0 {
		return strconv.Itoa(n>>20) + " MiB"
	}
	return strconv.Itoa(n) + " bytes"
}

// Quote quotes the first bytes of a line for an error message.
func Quote(line []byte) string {
	const n = 80
	if len(line) <= n {
		return strconv.Quote(string(line))
	}
	return strconv.Quote(string(line[:n])) + "…"
}
