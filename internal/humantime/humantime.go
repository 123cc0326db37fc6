// Package humantime writes lengths of time the way a person reads them at
// a glance, in the two largest units: "45s", "5m 3s", "2h 5m", "3d 4h".
// The command line and the dashboard both use it, so that one job's wait
// reads the same in both.
package humantime

import (
	"fmt"
	"time"
)

// Duration writes d (its absolute value) in at most its two largest units
// of d, h, m and s, whole ones, the smaller left out when zero: "0s", "45s",
// "5m 3s", "5m", "2h 5m", "3d 4h".
func Duration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	two := func(a int, au string, b int, bu string) string {
		if b == 0 {
			return fmt.Sprintf("%d%s", a, au)
		}
		return fmt.Sprintf("%d%s %d%s", a, au, b, bu)
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return two(int(d/time.Minute), "m", int(d%time.Minute/time.Second), "s")
	case d < 24*time.Hour:
		return two(int(d/time.Hour), "h", int(d%time.Hour/time.Minute), "m")
	default:
		return two(int(d/(24*time.Hour)), "d", int(d%(24*time.Hour)/time.Hour), "h")
	}
}
