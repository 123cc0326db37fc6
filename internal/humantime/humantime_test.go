package humantime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                "0s",
		900 * time.Millisecond:           "0s",
		45 * time.Second:                 "45s",
		-45 * time.Second:                "45s",
		5*time.Minute + 3*time.Second:    "5m 3s",
		5 * time.Minute:                  "5m",
		4*time.Hour + 59*time.Minute + 5: "4h 59m",
		5*time.Hour + 22*time.Minute:     "5h 22m",
		3*24*time.Hour + 4*time.Hour:     "3d 4h",
		2 * 24 * time.Hour:               "2d",
	} {
		require.Equal(t, want, Duration(d), "%v", d)
	}
}
