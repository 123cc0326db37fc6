package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildVersion is the version a release build or an image build sets with
// -ldflags "-X main.buildVersion=VERSION" (make image does); empty in a
// plain go build, where version reads what the go command recorded.
var buildVersion string

// version describes this build: the version set at link time if one was,
// else from the information the go command recorded in the binary: the
// module version (a tag when installed with go install ...@version), else
// the commit it was built from, whether the tree had changes, and the Go
// release.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if buildVersion != "" {
			return buildVersion
		}
		return "unknown (built without module information)"
	}
	return versionOf(info, buildVersion)
}

// versionOf is version for the given build information and link-time
// version.
func versionOf(info *debug.BuildInfo, linked string) string {
	if linked != "" {
		return linked + " " + info.GoVersion
	}
	v := info.Main.Version
	var rev, at, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if v == "" || v == "(devel)" {
		v = "devel"
		if rev != "" {
			v += " " + rev[:min(len(rev), 12)]
			if modified == "true" {
				v += " (modified)"
			}
			if at != "" {
				v += " " + at
			}
		}
	}
	return v + " " + info.GoVersion
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print jobdir's version",
		Long: `Print the version of this jobdir build: its release, or for a build from a
source tree the commit, whether the tree had changes, and the commit's time;
then the Go release that built it. jobdir --version prints the same.`,
		Example: `  jobdir version
  jobdir --version`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintf(a.stdout, "jobdir %s\n", version())
			return err
		},
	}
}
