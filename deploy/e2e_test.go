package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The podman variant of the example (podmanVariant) works around what
// Debian's podman 4.3.1 kube play does not do as a cluster does. The real
// manifests stay as a cluster needs them; only the copy the test plays is
// changed, and only so:
//
//   - A Deployment becomes as many Pods as its replicas (kube play runs one
//     pod per Deployment), named NAME-0, NAME-1, ... with a suffix of the run.
//   - The claim gets a name of the run (kube play fails if its volume exists)
//     and the annotations volume.podman.io/uid and gid, since kube play
//     ignores fsGroup: the volume's root belongs to the workers' UID and the
//     fsGroup.
//   - Every pod runs as the workers' UID with the fsGroup as its group
//     (runAsGroup), since without fsGroup no pod gets the store's group as a
//     supplementary one. The shape with several UIDs sharing a group is
//     tested with real processes by TestTrustFSGroup (filestore) and
//     TestWorkGroupAccessFSGroup (cmd/jobdir).
//   - serve gets its token in JOBDIR_TOKEN instead of the Secret's file:
//     kube play writes a Secret's data still base64-encoded, and 0644
//     root-owned, which serve refuses. TestServeTokenChecks (cmd/jobdir) has
//     the Secret's file as a cluster makes it.
//   - serve's port is published on 127.0.0.1 (hostPort) for the test to reach.
//   - The probes go: kube play makes an httpGet probe a curl command in
//     the container, which the image does not have, run from systemd
//     timers, which the machine does not have. The test polls /healthz.
//   - The pod affinity goes: there is one machine.
//   - podman kube down does not wait for terminationGracePeriodSeconds:
//     the test first stops the pods with podman pod stop --time GRACE, as a
//     kubelet would stop them.
//   - The Service and the CronJob are not played (kube play runs neither);
//     the test runs the CronJob's command itself with podman run once the
//     jobs are done.

// e2eEnv turns TestDeployKubePlay on (make e2e-deploy sets it).
const e2eEnv = "JOBDIR_E2E_DEPLOY"

// podman runs podman with the repository's containers.conf unless
// CONTAINERS_CONF names another.
func podman(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = os.Environ()
	if os.Getenv("CONTAINERS_CONF") == "" {
		conf, err := filepath.Abs(filepath.Join("podman", "containers.conf"))
		if err != nil {
			return "", err
		}
		cmd.Env = append(cmd.Env, "CONTAINERS_CONF="+conf)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// variant is the podman variant of the example, and what the test needs
// to know of it.
type variant struct {
	yaml       []byte
	claim      string   // the claim's (and podman volume's) name
	workers    []string // the worker pods' names
	serve      string   // the serve pod's name
	pruneArgs  []string // the CronJob's container args
	image      string
	uid, group int
	grace      int // the workers' terminationGracePeriodSeconds
}

// podmanVariant makes the podman variant (see the comment above) of the
// manifests in kubernetes/, for image, with serve's port on 127.0.0.1:port
// and token as its token; suffix makes its names unique.
func podmanVariant(t *testing.T, image, suffix string, port int, token string) variant {
	t.Helper()
	objs := readManifests(t, "kubernetes", "pvc.yaml", "worker.yaml", "serve.yaml", "prune.yaml")
	v := variant{image: image}
	var claimOf string
	// The workers' UID and the fsGroup.
	for _, o := range objs {
		if o["kind"] == "Deployment" && at(o, "metadata", "name") == "jobdir-worker" {
			v.uid = at(podSpec(o), "securityContext", "runAsUser").(int)
			v.group = at(podSpec(o), "securityContext", "fsGroup").(int)
			v.grace = at(podSpec(o), "terminationGracePeriodSeconds").(int)
		}
	}
	require.NotZero(t, v.uid)
	var out []obj
	for _, o := range objs {
		switch o["kind"] {
		case "PersistentVolumeClaim":
			claimOf = fmt.Sprint(at(o, "metadata", "name"))
			v.claim = claimOf + "-" + suffix
			md := at(o, "metadata").(obj)
			md["name"] = v.claim
			md["annotations"] = obj{"volume.podman.io/uid": strconv.Itoa(v.uid), "volume.podman.io/gid": strconv.Itoa(v.group)}
			out = append(out, o)
		case "CronJob":
			v.pruneArgs = argsOf(at(podSpec(o), "containers", 0))
		case "Deployment":
			replicas := at(o, "spec", "replicas").(int)
			name := fmt.Sprint(at(o, "metadata", "name"))
			for i := range replicas {
				// A fresh copy of the template for each pod.
				var tmpl obj
				b, err := yaml.Marshal(at(o, "spec", "template"))
				require.NoError(t, err)
				require.NoError(t, yaml.Unmarshal(b, &tmpl))
				spec := tmpl["spec"].(obj)
				pod := fmt.Sprintf("%s-%d-%s", name, i, suffix)
				sc := spec["securityContext"].(obj)
				sc["runAsUser"] = v.uid
				sc["runAsGroup"] = sc["fsGroup"]
				delete(spec, "affinity")
				var volumes []any
				for _, vol := range spec["volumes"].([]any) {
					if at(vol, "secret") != nil {
						continue
					}
					if c, ok := at(vol, "persistentVolumeClaim").(obj); ok && c["claimName"] == claimOf {
						c["claimName"] = v.claim
					}
					volumes = append(volumes, vol)
				}
				spec["volumes"] = volumes
				for _, c := range spec["containers"].([]any) {
					c := c.(obj)
					c["image"] = image
					delete(c, "readinessProbe")
					delete(c, "livenessProbe")
					var mounts []any
					for _, m := range c["volumeMounts"].([]any) {
						if at(m, "mountPath") != "/run/secrets/jobdir" {
							mounts = append(mounts, m)
						}
					}
					c["volumeMounts"] = mounts
					args := argsOf(c)
					if tf := flagValue(args, "--token-file"); tf != "" {
						var kept []any
						for j := 0; j < len(args); j++ {
							if args[j] == "--token-file" {
								j++
								continue
							}
							kept = append(kept, args[j])
						}
						c["args"] = kept
						c["env"] = []any{obj{"name": "JOBDIR_TOKEN", "value": token}}
						for _, p := range c["ports"].([]any) {
							p := p.(obj)
							p["hostPort"] = port
							p["hostIP"] = "127.0.0.1"
						}
						v.serve = pod
					} else {
						v.workers = append(v.workers, pod)
					}
				}
				out = append(out, obj{
					"apiVersion": "v1",
					"kind":       "Pod",
					"metadata":   obj{"name": pod, "labels": at(tmpl, "metadata", "labels")},
					"spec":       spec,
				})
			}
		}
	}
	require.NotEmpty(t, v.serve)
	require.Len(t, v.workers, 2)
	require.NotEmpty(t, v.pruneArgs)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	for _, o := range out {
		require.NoError(t, enc.Encode(o))
	}
	require.NoError(t, enc.Close())
	v.yaml = buf.Bytes()
	return v
}

// apiJob is the part of the HTTP API's job (docs/http-api.md) the test reads.
type apiJob struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Attempt int    `json:"attempt"`
	Worker  string `json:"worker"`
	// FinishedAt is when the job finished, by the clock of the container
	// that finished it, which is the host's.
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	History    []struct {
		Attempt int    `json:"attempt"`
		Worker  string `json:"worker"`
		End     string `json:"end"`
	} `json:"history"`
}

// client talks to serve's HTTP API.
type client struct {
	base, token string
	http        *http.Client
}

func (c *client) do(ctx context.Context, method, path string, body any, out any) (int, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w: %s", method, path, err, b)
		}
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	return resp.StatusCode, nil
}

func (c *client) jobs(ctx context.Context, t *testing.T, ids []string) []apiJob {
	t.Helper()
	out := make([]apiJob, len(ids))
	for i, id := range ids {
		_, err := c.do(ctx, "GET", "/v1/jobs/"+id, nil, &out[i])
		require.NoError(t, err)
	}
	return out
}

// freePort is a TCP port free on 127.0.0.1 at the time of the call.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestDeployKubePlay runs the Kubernetes example (its podman variant) with
// podman kube play: two worker pods and a serve pod on one volume. It
// submits jobs through the HTTP API, kills a worker pod while it runs
// jobs, and checks that every job succeeded and ran to its end exactly
// once, that the killed pod's jobs ran again on the other worker, that the
// dashboard answers, and that after podman kube down jobdir fsck finds the
// store on the volume consistent. It measures the time from kube play to
// the first job finished and from the kill to the recovery of the killed
// pod's jobs. Needs root, podman and runc, and the image (make e2e-deploy
// builds it): JOBDIR_E2E_DEPLOY=1 JOBDIR_E2E_IMAGE=localhost/jobdir:dev.
func TestDeployKubePlay(t *testing.T) {
	if os.Getenv(e2eEnv) != "1" {
		t.Skipf("the deployment's end-to-end test runs with %s=1 (make e2e-deploy)", e2eEnv)
	}
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("%s=1 but podman is not installed (apt-get install podman runc)", e2eEnv)
	}
	image := os.Getenv("JOBDIR_E2E_IMAGE")
	if image == "" {
		image = "localhost/jobdir:dev"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := podman(ctx, "image", "exists", image)
	require.NoError(t, err, "no image %s: make image builds it", image)

	// The image: jobdir version prints the version make image linked in.
	out, err := podman(ctx, "run", "--rm", image, "version")
	require.NoError(t, err)
	label, err := podman(ctx, "image", "inspect", "--format", "{{index .Labels \"org.opencontainers.image.version\"}}", image)
	require.NoError(t, err)
	require.Regexp(t, `^jobdir `+regexp.QuoteMeta(strings.TrimSpace(label))+` go1\.\d+`, out,
		"jobdir version in the image prints the version make image linked in, the image's version label")
	size, err := podman(ctx, "image", "inspect", "--format", "{{.Size}}", image)
	require.NoError(t, err)
	t.Logf("image %s: %s bytes, jobdir version: %s", image, strings.TrimSpace(size), strings.TrimSpace(out))

	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	var tok [24]byte
	_, _ = rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	port := freePort(t)
	v := podmanVariant(t, image, "e2e"+hex.EncodeToString(suffix[:]), port, token)
	file := filepath.Join(t.TempDir(), "jobdir-podman.yaml")
	require.NoError(t, os.WriteFile(file, v.yaml, 0o600))

	played := time.Now()
	out, err = podman(ctx, "kube", "play", file)
	down := false
	t.Cleanup(func() {
		// A fresh context: the test's may have ended.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if t.Failed() {
			for _, p := range append(append([]string{}, v.workers...), v.serve) {
				logs, _ := podman(ctx, "logs", "--tail", "40", p+"-"+containerOf(p))
				t.Logf("logs of %s:\n%s", p, logs)
			}
		}
		if out, err := podman(ctx, "kube", "down", file); err != nil && !down {
			t.Logf("podman kube down: %v: %s", err, out)
		}
		if out, err := podman(ctx, "volume", "rm", "-f", v.claim); err != nil {
			t.Logf("podman volume rm: %v: %s", err, out)
		}
	})
	require.NoError(t, err, out)

	c := &client{base: fmt.Sprintf("http://127.0.0.1:%d", port), token: token, http: &http.Client{Timeout: 10 * time.Second}}
	require.Eventually(t, func() bool {
		resp, err := c.http.Get(c.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 60*time.Second, 200*time.Millisecond, "serve's /healthz never answered")
	t.Logf("serve answers /healthz %v after kube play", time.Since(played).Round(time.Millisecond))

	// jobdir is PID 1 of each container, as the image's user.
	for _, p := range append(append([]string{}, v.workers...), v.serve) {
		out, err := podman(ctx, "exec", p+"-"+containerOf(p), "sh", "-c", `tr '\0' ' ' </proc/1/cmdline; echo; id -u`)
		require.NoError(t, err, out)
		require.Regexp(t, `^/jobdir --group-access --dir /data/jobdir (work|serve) .*\n`+strconv.Itoa(v.uid)+`\n$`, out, p)
	}

	// Jobs that sleep, then append their ID to a file on the volume: a job
	// whose attempt is killed before its end appends nothing, so each ID
	// must be there exactly once.
	const jobs = 12
	var ids []string
	for i := range jobs {
		var j apiJob
		_, err := c.do(ctx, "POST", "/v1/jobs", map[string]any{
			"kind": "exec",
			"key":  fmt.Sprintf("e2e-%d", i),
			"payload": map[string]any{"dir": "/tmp", "argv": []string{"sh", "-c",
				`sleep 3; echo "$JOBDIR_JOB_ID $JOBDIR_ATTEMPT $(hostname)" >> /data/ran`}},
		}, &j)
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}

	// Wait until the first worker runs jobs, then kill its pod.
	killed := v.workers[0]
	var victims []string
	require.Eventually(t, func() bool {
		victims = victims[:0]
		for _, j := range c.jobs(ctx, t, ids) {
			// One that started just now, so that it is still running when
			// the kill lands.
			if j.State == "running" && strings.Contains(j.Worker, killed) && time.Since(j.StartedAt) < time.Second {
				victims = append(victims, j.ID)
			}
		}
		return len(victims) > 0
	}, 60*time.Second, 100*time.Millisecond, "the worker pod %s never ran a job", killed)
	killedAt := time.Now() // the recovery time counts podman's own
	out, err = podman(ctx, "pod", "kill", killed)
	require.NoError(t, err, out)
	t.Logf("killed pod %s while it ran %d jobs (podman pod kill took %v)", killed, len(victims),
		time.Since(killedAt).Round(time.Millisecond))

	// Recovery: every job of the killed pod queued again by a live
	// process, its attempt counted as worker_lost; then run to its end by
	// the other worker.
	require.Eventually(t, func() bool {
		for _, j := range c.jobs(ctx, t, victims) {
			if len(j.History) == 0 || j.History[0].End != "worker_lost" {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "the jobs of the killed pod were not recovered")
	t.Logf("recovery: the killed pod's jobs were queued again %v after the kill",
		time.Since(killedAt).Round(time.Millisecond))

	require.Eventually(t, func() bool {
		done := 0
		for _, j := range c.jobs(ctx, t, ids) {
			if j.State == "succeeded" {
				done++
			}
			require.NotEqual(t, "failed", j.State, j.ID)
		}
		return done == jobs
	}, 120*time.Second, 200*time.Millisecond, "the jobs did not all succeed")
	t.Logf("every job succeeded %v after kube play, %v after the kill", time.Since(played).Round(time.Millisecond),
		time.Since(killedAt).Round(time.Millisecond))

	final := c.jobs(ctx, t, ids)
	first := final[0].FinishedAt
	for _, j := range final {
		if j.FinishedAt.Before(first) {
			first = j.FinishedAt
		}
	}
	t.Logf("the first job finished %v after kube play", first.Sub(played).Round(time.Millisecond))
	for _, j := range final {
		require.Equal(t, "succeeded", j.State, j.ID)
		// A job lost its first attempt, with the killed pod, or none.
		if len(j.History) > 0 && j.History[0].End == "worker_lost" {
			require.Equal(t, 2, j.Attempt, "%s ran on the killed pod", j.ID)
			require.Contains(t, j.History[0].Worker, killed, j.ID)
			require.NotContains(t, j.Worker, killed, j.ID)
		} else {
			require.False(t, slices.Contains(victims, j.ID), "%s ran on the killed pod", j.ID)
			require.Equal(t, 1, j.Attempt, j.ID)
		}
	}

	// The dashboard: / leads to the sign-in page, which the token passes.
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := browser.Get(c.base + "/")
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Contains(t, resp.Request.URL.Path, "/ui/signin")
	require.Contains(t, string(page), "Sign in")
	resp, err = browser.PostForm(c.base+"/ui/signin", url.Values{"token": {token}, "next": {"/ui/"}})
	require.NoError(t, err)
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, string(page))
	require.Equal(t, "/ui/", resp.Request.URL.Path)
	require.Contains(t, string(page), "succeeded")

	// A job that runs when the pods are stopped: its worker gets SIGTERM,
	// lets it run for --shutdown-grace, stops it and queues it again, its
	// attempt not counted, all before the pod's grace period runs out and
	// podman SIGKILLs it (which would count the attempt: worker_lost).
	var long apiJob
	_, err = c.do(ctx, "POST", "/v1/jobs", map[string]any{"kind": "exec", "key": "e2e-long",
		"payload": map[string]any{"dir": "/tmp", "argv": []string{"sleep", "300"}}}, &long)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return c.jobs(ctx, t, []string{long.ID})[0].State == "running"
	}, 30*time.Second, 100*time.Millisecond)

	// Stop everything, then look at the volume from the host.
	// podman kube down does not wait for terminationGracePeriodSeconds
	// (nor does podman pod stop by default: 10s), so the pods are stopped
	// first as a kubelet stops them: SIGTERM, SIGKILL after the grace.
	downAt := time.Now()
	out, err = podman(ctx, append([]string{"pod", "stop", "--time", strconv.Itoa(v.grace)}, append(v.workers[1:], v.serve)...)...)
	require.NoError(t, err, out)
	t.Logf("podman pod stop --time %d took %v", v.grace, time.Since(downAt).Round(time.Millisecond))
	out, err = podman(ctx, "kube", "down", file)
	require.NoError(t, err, out)
	down = true
	mount, err := podman(ctx, "volume", "inspect", "--format", "{{.Mountpoint}}", v.claim)
	require.NoError(t, err)
	mount = strings.TrimSpace(mount)

	ran, err := os.ReadFile(filepath.Join(mount, "ran"))
	require.NoError(t, err)
	times := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(ran))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		require.Len(t, f, 3, sc.Text())
		times[f[0]]++
	}
	for _, id := range ids {
		require.Equal(t, 1, times[id], "job %s ran to its end %d times", id, times[id])
	}
	require.Len(t, times, jobs)

	// The CronJob's prune, as the CronJob would run it, then fsck.
	out, err = podman(ctx, append([]string{"run", "--rm", "--user", fmt.Sprintf("%d:%d", v.uid, v.group),
		"-v", v.claim + ":/data", image}, v.pruneArgs...)...)
	require.NoError(t, err, out)
	jobdir := hostJobdir(t)
	store := filepath.Join(mount, "jobdir")
	fsck := exec.CommandContext(ctx, jobdir, "--group-access", "--dir", store, "fsck")
	fout, err := fsck.CombinedOutput()
	require.NoError(t, err, "jobdir fsck after kube down: %s", fout)
	t.Logf("jobdir fsck: %s", strings.TrimSpace(string(fout)))
	get := exec.CommandContext(ctx, jobdir, "--group-access", "--dir", store, "get", "--json", long.ID)
	gout, err := get.Output()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(gout, &long))
	require.Equal(t, "queued", long.State, "%s", gout)
	require.Len(t, long.History, 1, "%s", gout)
	require.Equal(t, "interrupted", long.History[0].End, "the pod's grace period must let the worker stop its job itself: %s", gout)
	list := exec.CommandContext(ctx, jobdir, "--group-access", "--dir", store, "list", "--json", "--state", "succeeded")
	lout, err := list.Output()
	require.NoError(t, err)
	require.Equal(t, jobs, strings.Count(string(lout), `"id":`), "the store on the volume holds every job, succeeded")
}

// containerOf is the container name of a pod of the variant: kube play
// names a pod's container POD-CONTAINER.
func containerOf(pod string) string {
	if strings.HasPrefix(pod, "jobdir-serve") {
		return "serve"
	}
	return "worker"
}

// hostJobdir builds the jobdir command for the host.
func hostJobdir(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "jobdir")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/jobdir").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}
