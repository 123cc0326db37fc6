package clip

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestString(t *testing.T) {
	require.Equal(t, "short", String("short", 5))
	require.Equal(t, "abc…", String("abcdef", 3))
	// "é" is two bytes: a cut inside it goes back to its start.
	got := String("aé", 2)
	require.Equal(t, "a…", got)
	require.True(t, utf8.ValidString(got))
	require.Equal(t, "…", String("éé", 1))
}
