// Package clip shortens text to a bound in bytes, keeping it valid UTF-8:
// the error messages a job keeps, and the names an error quotes.
package clip

import "unicode/utf8"

// String returns s if it has at most n bytes, and otherwise its first n
// bytes or fewer, cut at the start of a character, followed by "…".
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
