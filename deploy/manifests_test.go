// Package deploy holds the tests of the container image and of the
// Kubernetes example in deploy/kubernetes: TestManifests checks the
// manifests' settings on every run, and TestDeployKubePlay (make
// e2e-deploy) runs them, with the image, under a real container runtime.
package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The runner's defaults that the manifests' grace periods must exceed
// (jobdir work --shutdown-grace and --kill-grace).
const (
	shutdownGrace = 10 * time.Second
	killGrace     = 5 * time.Second
)

// obj is one Kubernetes object as decoded YAML.
type obj = map[string]any

// readManifests decodes every object of the YAML files of dir, in the
// order of files.
func readManifests(t testing.TB, dir string, files ...string) []obj {
	t.Helper()
	var out []obj
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o obj
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, f)
			if o != nil {
				out = append(out, o)
			}
		}
	}
	return out
}

// at follows keys (string for a map, int for a list) from v; nil if any
// step is missing.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(obj)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// podSpec is the pod template's spec of a Deployment, StatefulSet or
// CronJob, or the spec of a Pod.
func podSpec(o obj) obj {
	switch o["kind"] {
	case "Pod":
		s, _ := at(o, "spec").(obj)
		return s
	case "CronJob":
		s, _ := at(o, "spec", "jobTemplate", "spec", "template", "spec").(obj)
		return s
	default:
		s, _ := at(o, "spec", "template", "spec").(obj)
		return s
	}
}

// argsOf is a container's args as strings.
func argsOf(c any) []string {
	var out []string
	for _, a := range at(c, "args").([]any) {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

// flagValue is the value after flag in args, or "".
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// TestManifests checks that the Kubernetes example has what
// docs/operations.md (Kubernetes) says a store on a shared volume needs:
// a ReadWriteOnce claim, every pod pinned to the node of the others, one
// mount of the whole store, the fsGroup with --group-access everywhere,
// a grace period above the runner's, /healthz probes and a 0400 token
// file for serve, resource requests; and that the PostgreSQL variant
// takes its store from a Secret and mounts no volume.
func TestManifests(t *testing.T) {
	objs := readManifests(t, "kubernetes", "pvc.yaml", "worker.yaml", "serve.yaml", "prune.yaml")
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[fmt.Sprint(o["kind"])]++
	}
	require.Equal(t, map[string]int{"PersistentVolumeClaim": 1, "Deployment": 2, "Service": 1, "CronJob": 1}, kinds)

	var claim string
	for _, o := range objs {
		if o["kind"] == "PersistentVolumeClaim" {
			claim = fmt.Sprint(at(o, "metadata", "name"))
			require.Equal(t, []any{"ReadWriteOnce"}, at(o, "spec", "accessModes"), "the claim must be ReadWriteOnce, never ReadWriteMany")
		}
	}
	var fsGroup any
	for _, o := range objs {
		spec := podSpec(o)
		if spec == nil {
			continue
		}
		name := fmt.Sprint(at(o, "metadata", "name"))
		labels := at(o, "spec", "template", "metadata", "labels")
		if o["kind"] == "CronJob" {
			labels = at(o, "spec", "jobTemplate", "spec", "template", "metadata", "labels")
		}
		term := at(spec, "affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution", 0)
		require.NotNil(t, term, "%s: no required pod affinity", name)
		require.Equal(t, "kubernetes.io/hostname", at(term, "topologyKey"), name)
		for k, v := range at(term, "labelSelector", "matchLabels").(obj) {
			require.Equal(t, v, at(labels, k), "%s: its pods must match their own affinity, or the first cannot be placed", name)
		}

		sc := at(spec, "securityContext")
		require.Equal(t, true, at(sc, "runAsNonRoot"), name)
		require.NotNil(t, at(sc, "runAsGroup"), "%s: without runAsGroup the group is 0", name)
		require.Equal(t, "OnRootMismatch", at(sc, "fsGroupChangePolicy"), name)
		if fsGroup == nil {
			fsGroup = at(sc, "fsGroup")
		}
		require.NotNil(t, fsGroup, name)
		require.Equal(t, fsGroup, at(sc, "fsGroup"), "%s: every pod of the store shares one fsGroup", name)

		if o["kind"] != "CronJob" {
			grace, ok := at(spec, "terminationGracePeriodSeconds").(int)
			require.True(t, ok, "%s: no terminationGracePeriodSeconds", name)
			require.Greater(t, time.Duration(grace)*time.Second, shutdownGrace+killGrace, name)
		}

		c := at(spec, "containers", 0)
		args := argsOf(c)
		require.Contains(t, args, "--group-access", name)
		require.NotEmpty(t, at(c, "resources", "requests", "cpu"), name)
		require.NotEmpty(t, at(c, "resources", "requests", "memory"), name)
		for _, f := range []string{"--shutdown-grace", "--kill-grace"} {
			if v := flagValue(args, f); v != "" {
				d, err := time.ParseDuration(v)
				require.NoError(t, err)
				require.Equal(t, map[string]time.Duration{"--shutdown-grace": shutdownGrace, "--kill-grace": killGrace}[f], d,
					"%s: %s changed; change the grace period and this test with it", name, f)
			}
		}
		// One volumeMount of the claim, holding --dir, without subPath.
		mounts := 0
		for _, v := range at(spec, "volumes").([]any) {
			if at(v, "persistentVolumeClaim", "claimName") != claim {
				continue
			}
			for _, m := range at(c, "volumeMounts").([]any) {
				if at(m, "name") == at(v, "name") {
					mounts++
					require.Nil(t, at(m, "subPath"), name)
					require.True(t, strings.HasPrefix(flagValue(args, "--dir"), fmt.Sprint(at(m, "mountPath"))+"/"), name)
				}
			}
		}
		require.Equal(t, 1, mounts, "%s: the store must be one mount of the claim", name)

		if at(c, "name") == "serve" {
			require.Equal(t, "/healthz", at(c, "readinessProbe", "httpGet", "path"), name)
			require.Equal(t, "/healthz", at(c, "livenessProbe", "httpGet", "path"), name)
			tokenFile := flagValue(args, "--token-file")
			require.NotEmpty(t, tokenFile, name)
			var secret any
			for _, m := range at(c, "volumeMounts").([]any) {
				if strings.HasPrefix(tokenFile, fmt.Sprint(at(m, "mountPath"))+"/") {
					for _, v := range at(spec, "volumes").([]any) {
						if at(v, "name") == at(m, "name") {
							secret = at(v, "secret")
						}
					}
				}
			}
			require.NotNil(t, secret, "%s: the token file comes from a Secret volume", name)
			require.Equal(t, 0o400, at(secret, "defaultMode"), name)
		}
	}

	pg := readManifests(t, filepath.Join("kubernetes", "postgres"), "worker.yaml", "serve.yaml", "prune.yaml")
	require.Len(t, pg, 4) // two Deployments, the Service, the CronJob
	for _, o := range pg {
		spec := podSpec(o)
		if spec == nil {
			continue
		}
		name := fmt.Sprint(at(o, "metadata", "name"))
		require.Nil(t, at(spec, "volumes", 0, "persistentVolumeClaim"), "%s: a PostgreSQL store needs no shared volume", name)
		require.Nil(t, at(spec, "affinity", "podAffinity"), "%s: a PostgreSQL store's pods may run on any node", name)
		c := at(spec, "containers", 0)
		require.NotContains(t, argsOf(c), "--dir", name)
		var fromSecret bool
		for _, e := range at(c, "env").([]any) {
			if at(e, "name") == "JOBDIR_STORE" && at(e, "valueFrom", "secretKeyRef", "name") != nil {
				fromSecret = true
			}
		}
		require.True(t, fromSecret, "%s: JOBDIR_STORE, which holds the database's password, comes from a Secret", name)
	}
}
