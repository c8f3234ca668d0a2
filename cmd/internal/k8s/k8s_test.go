package k8s_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/psgraph/psgraph/cmd/internal/k8s"
	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/partition"
)

func writePlan(t *testing.T, model string, trainers, pservers, minBlock int) (string, *partition.Plan) {
	t.Helper()
	g, err := dsl.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	p, err := partition.Split(g, partition.Options{Trainers: trainers, PServers: pservers, Mode: partition.Sync, MinBlockSize: minBlock})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "plan")
	if err := p.Write(dir); err != nil {
		t.Fatal(err)
	}
	if p, err = partition.ReadPlan(dir); err != nil {
		t.Fatal(err)
	}
	return dir, p
}

// manifests are the decoded objects, by kind and name.
type manifests struct {
	cm     map[string]*corev1.ConfigMap
	svc    map[string]*corev1.Service
	pvc    map[string]*corev1.PersistentVolumeClaim
	jobs   map[string]*batchv1.Job
	deps   map[string]*appsv1.Deployment
	kinds  []string
	header string
}

// decode splits the YAML stream and decodes each document strictly into
// its API type: an unknown or misspelt field fails the test.
func decode(t *testing.T, src []byte) manifests {
	t.Helper()
	m := manifests{cm: map[string]*corev1.ConfigMap{}, svc: map[string]*corev1.Service{}, pvc: map[string]*corev1.PersistentVolumeClaim{}, jobs: map[string]*batchv1.Job{}, deps: map[string]*appsv1.Deployment{}}
	docs := strings.Split(string(src), "---\n")
	m.header = docs[0]
	for i, doc := range docs[1:] {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		var obj any
		var store func()
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			obj, store = o, func() { m.cm[o.Name] = o }
		case "v1 Service":
			o := &corev1.Service{}
			obj, store = o, func() { m.svc[o.Name] = o }
		case "v1 PersistentVolumeClaim":
			o := &corev1.PersistentVolumeClaim{}
			obj, store = o, func() { m.pvc[o.Name] = o }
		case "batch/v1 Job":
			o := &batchv1.Job{}
			obj, store = o, func() { m.jobs[o.Name] = o }
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			obj, store = o, func() { m.deps[o.Name] = o }
		default:
			t.Fatalf("document %d is a %s %s, which psgraph k8s should not write", i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("document %d (%s) does not decode strictly: %v\n%s", i, tm.Kind, err, doc)
		}
		store()
		m.kinds = append(m.kinds, tm.Kind)
	}
	return m
}

// nodeEnv lists the PSGRAPH_* variables psgraph's own code reads or sets
// for its nodes (cmd/*.go, tests aside): the manifests must set each.
func nodeEnv(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cmd sources: %v", err)
	}
	seen := map[string]bool{}
	re := regexp.MustCompile(`"(PSGRAPH_[A-Z_]+)[="]`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, mt := range re.FindAllSubmatch(b, -1) {
			seen[string(mt[1])] = true
		}
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	if len(out) < 6 {
		t.Fatalf("found only %v in cmd/*.go; the pattern missed the node's variables", out)
	}
	return out
}

func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func portOf(c corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

func argOf(c corev1.Container, flag string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

// checkInvariants is what makes the manifests one working job.
func checkInvariants(t *testing.T, o k8s.Options, p *partition.Plan, m manifests) {
	t.Helper()
	in := p.Info
	M, N := in.PServers, in.Trainers
	held, ckpt := k8s.TrainerStateBytes(p), k8s.TrainersCheckpoint(p)
	claims := M + 1
	if ckpt {
		claims += N // a claim per trainer for the state it holds, the stream's position
	}
	services := 1 // the pservers'
	if o.ServeReplicas > 0 {
		services++ // the serving replicas'
	}
	if len(m.cm) != 1 || len(m.svc) != services || len(m.jobs) != M+N || len(m.pvc) != claims {
		t.Fatalf("%dx%d: %d ConfigMaps, %d Services, %d Jobs, %d claims; want 1, %d, %d, %d", N, M, len(m.cm), len(m.svc), len(m.jobs), len(m.pvc), services, M+N, claims)
	}
	cm := m.cm[o.Name+"-plan"]
	svc := m.svc[o.Name]
	if cm == nil || svc == nil {
		t.Fatalf("want ConfigMap %s-plan and Service %s", o.Name, o.Name)
	}
	for _, f := range append([]string{partition.PlanFileName, in.Files.Trainer}, in.Files.PServers...) {
		if cm.Data[f] == "" {
			t.Errorf("ConfigMap lacks %s", f)
		}
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v; want a headless Service publishing pservers before they are ready", svc.Name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	env := nodeEnv(t)
	indexes := map[string]map[string]bool{"pserver": {}, "trainer": {}}
	endpoints := make([]string, M) // the pservers' DNS names, in index order
	checkPod := func(job *batchv1.Job, role string) (corev1.Container, map[string]corev1.EnvVar) {
		t.Helper()
		ps := job.Spec.Template.Spec
		if job.Namespace != o.Namespace {
			t.Errorf("Job %s namespace %q, want %q", job.Name, job.Namespace, o.Namespace)
		}
		if job.Spec.Selector != nil || job.Spec.ManualSelector != nil {
			t.Errorf("Job %s sets its own selector; the Job controller generates one that matches its pods", job.Name)
		}
		if job.Spec.Completions == nil || *job.Spec.Completions != 1 || *job.Spec.Parallelism != 1 {
			t.Errorf("Job %s must run its one node once", job.Name)
		}
		if len(ps.Containers) != 1 {
			t.Fatalf("Job %s has %d containers, want 1", job.Name, len(ps.Containers))
		}
		c := ps.Containers[0]
		if c.Image != o.Image || strings.Join(c.Command, " ") != "psgraph run" {
			t.Errorf("Job %s runs %q %q, want %q psgraph run", job.Name, c.Image, c.Command, o.Image)
		}
		e := map[string]corev1.EnvVar{}
		for _, v := range c.Env {
			if _, dup := e[v.Name]; dup {
				t.Errorf("Job %s sets %s twice", job.Name, v.Name)
			}
			e[v.Name] = v
		}
		for _, v := range env {
			skip := v == "PSGRAPH_LISTEN" && role == "trainer" || v == "PSGRAPH_PSERVERS" && role == "pserver"
			if _, ok := e[v]; !ok && !skip {
				t.Errorf("Job %s does not set %s, which the node reads", job.Name, v)
			}
		}
		if e["PSGRAPH_ROLE"].Value != role || e["PSGRAPH_PLAN"].Value != k8s.PlanMount {
			t.Errorf("Job %s: PSGRAPH_ROLE %q, PSGRAPH_PLAN %q", job.Name, e["PSGRAPH_ROLE"].Value, e["PSGRAPH_PLAN"].Value)
		}
		if r := e["PSGRAPH_TOKEN"].ValueFrom; r == nil || r.SecretKeyRef == nil || r.SecretKeyRef.Name != o.TokenSecret || r.SecretKeyRef.Key != o.TokenKey {
			t.Errorf("Job %s does not take PSGRAPH_TOKEN from Secret %s key %s", job.Name, o.TokenSecret, o.TokenKey)
		}
		// the index: the pod's own label, through the downward API
		idx := e["PSGRAPH_INDEX"].ValueFrom
		if idx == nil || idx.FieldRef == nil || idx.FieldRef.FieldPath != "metadata.labels['"+k8s.IndexLabel+"']" {
			t.Fatalf("Job %s: PSGRAPH_INDEX must come from the pod label %s (downward API), got %+v", job.Name, k8s.IndexLabel, e["PSGRAPH_INDEX"])
		}
		label := job.Spec.Template.Labels[k8s.IndexLabel]
		if n, err := strconv.Atoi(label); err != nil || n < 0 || indexes[role][label] {
			t.Errorf("Job %s: pod index label %q is not a fresh index", job.Name, label)
		}
		indexes[role][label] = true
		// metrics: the address the node serves, the named port, the
		// scrape annotations and the probes agree
		mport, ok := portOf(c, "metrics")
		_, addrPort, _ := net.SplitHostPort(e["PSGRAPH_METRICS_ADDR"].Value)
		an := job.Spec.Template.Annotations
		if !ok || addrPort != strconv.Itoa(int(mport)) || an["prometheus.io/scrape"] != "true" || an["prometheus.io/port"] != addrPort || an["prometheus.io/path"] != "/metrics" {
			t.Errorf("Job %s: metrics port %d, PSGRAPH_METRICS_ADDR %q, annotations %v disagree", job.Name, mport, e["PSGRAPH_METRICS_ADDR"].Value, an)
		}
		for name, pr := range map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe} {
			if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != name || pr.HTTPGet.Port.StrVal != "metrics" {
				t.Errorf("Job %s: probe %s is %+v, want an HTTP GET of %s on the metrics port", job.Name, name, pr, name)
			}
		}
		// every mount has its volume; every claim exists
		vols := map[string]corev1.Volume{}
		for _, v := range ps.Volumes {
			vols[v.Name] = v
			if v.PersistentVolumeClaim != nil && m.pvc[v.PersistentVolumeClaim.ClaimName] == nil {
				t.Errorf("Job %s mounts claim %s, which the manifests do not create", job.Name, v.PersistentVolumeClaim.ClaimName)
			}
			if v.ConfigMap != nil && v.ConfigMap.Name != cm.Name {
				t.Errorf("Job %s mounts ConfigMap %s, not %s", job.Name, v.ConfigMap.Name, cm.Name)
			}
		}
		for _, vm := range c.VolumeMounts {
			if _, ok := vols[vm.Name]; !ok {
				t.Errorf("Job %s mounts volume %s, which its pod lacks", job.Name, vm.Name)
			}
			if vm.MountPath == k8s.PlanMount && vols[vm.Name].ConfigMap == nil {
				t.Errorf("Job %s: %s is not the plan ConfigMap", job.Name, k8s.PlanMount)
			}
		}
		// resources: requested, memory limited at its request
		req, lim := c.Resources.Requests, c.Resources.Limits
		if req.Cpu().IsZero() || req.Memory().IsZero() || req.Memory().Cmp(*lim.Memory()) != 0 {
			t.Errorf("Job %s: requests %v, limits %v; want CPU and memory requested, memory limited at its request", job.Name, req, lim)
		}
		sc := ps.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.FSGroup == nil || *sc.FSGroup != *sc.RunAsUser {
			t.Errorf("Job %s: pod security context %+v; want non-root with fsGroup its user, so the claims are writable", job.Name, sc)
		}
		return c, e
	}

	for i := range M {
		job := m.jobs[k8s.PServerJob(o.Name, i)]
		if job == nil {
			t.Fatalf("no Job %s", k8s.PServerJob(o.Name, i))
		}
		c, e := checkPod(job, "pserver")
		tmpl := job.Spec.Template
		if got := tmpl.Labels[k8s.IndexLabel]; got != strconv.Itoa(i) {
			t.Errorf("Job %s runs pserver %s", job.Name, got)
		}
		if !selects(svc.Spec.Selector, tmpl.Labels) {
			t.Errorf("the Service selects %v, which pserver %d's pods (%v) lack", svc.Spec.Selector, i, tmpl.Labels)
		}
		if tmpl.Spec.Subdomain != svc.Name || tmpl.Spec.Hostname == "" {
			t.Errorf("pserver %d: hostname %q under subdomain %q, want a hostname under the Service %s", i, tmpl.Spec.Hostname, tmpl.Spec.Subdomain, svc.Name)
		}
		port, ok := portOf(c, "psgraph")
		if _, lp, _ := net.SplitHostPort(e["PSGRAPH_LISTEN"].Value); !ok || lp != strconv.Itoa(int(port)) {
			t.Errorf("pserver %d listens on %q, its container port psgraph is %d", i, e["PSGRAPH_LISTEN"].Value, port)
		}
		for _, sp := range svc.Spec.Ports {
			if _, ok := portOf(c, sp.TargetPort.StrVal); !ok || sp.TargetPort.StrVal == "" {
				t.Errorf("the Service's port %s targets %q, which pserver %d does not name", sp.Name, sp.TargetPort.String(), i)
			}
			if sp.Name == "psgraph" && sp.Port != port {
				t.Errorf("the Service's psgraph port %d is not the pservers' %d", sp.Port, port)
			}
		}
		endpoints[i] = tmpl.Spec.Hostname + "." + tmpl.Spec.Subdomain + ":" + strconv.Itoa(int(port))
		// its checkpoints: on its own claim, sized for its bytes
		dir, ok := argOf(c, "--checkpoint-dir")
		var claim string
		for _, vm := range c.VolumeMounts {
			if vm.MountPath == dir {
				for _, v := range tmpl.Spec.Volumes {
					if v.Name == vm.Name && v.PersistentVolumeClaim != nil {
						claim = v.PersistentVolumeClaim.ClaimName
					}
				}
			}
		}
		if !ok || claim != k8s.CheckpointClaim(o.Name, i) {
			t.Errorf("pserver %d checkpoints to %q on claim %q, want its own claim %s", i, dir, claim, k8s.CheckpointClaim(o.Name, i))
		}
		if every, _ := argOf(c, "--checkpoint-every"); every == "" || every == "0" {
			t.Errorf("pserver %d never checkpoints", i)
		}
		size := m.pvc[claim].Spec.Resources.Requests[corev1.ResourceStorage]
		if size.Value() < int64(3*in.Load[i].Bytes) {
			t.Errorf("pserver %d's claim of %s cannot hold a checkpoint of its %d bytes", i, size.String(), in.Load[i].Bytes)
		}
		if mem := c.Resources.Requests[corev1.ResourceMemory]; o.Memory == "" && mem.Value() < int64((4+N)*in.Load[i].Bytes) {
			t.Errorf("pserver %d requests %s for %d bytes of blocks and %d trainers", i, mem.String(), in.Load[i].Bytes, N)
		}
		if tmpl.Spec.RestartPolicy != corev1.RestartPolicyOnFailure || *job.Spec.BackoffLimit != int32(o.BackoffLimit) {
			t.Errorf("pserver %d: restart %s, backoff %d; a pserver restarts from its checkpoint (OnFailure, %d)", i, tmpl.Spec.RestartPolicy, *job.Spec.BackoffLimit, o.BackoffLimit)
		}
		if tt, _ := argOf(c, "--trainer-timeout"); tt == "" {
			t.Errorf("pserver %d keeps the 30s --trainer-timeout, shorter than a replaced trainer pod takes", i)
		}
	}
	for i := range N {
		job := m.jobs[k8s.TrainerJob(o.Name, i)]
		if job == nil {
			t.Fatalf("no Job %s", k8s.TrainerJob(o.Name, i))
		}
		c, e := checkPod(job, "trainer")
		tmpl := job.Spec.Template
		if got := tmpl.Labels[k8s.IndexLabel]; got != strconv.Itoa(i) {
			t.Errorf("Job %s runs trainer %s", job.Name, got)
		}
		if selects(svc.Spec.Selector, tmpl.Labels) {
			t.Errorf("the pservers' Service selects trainer %d", i)
		}
		if got := e["PSGRAPH_PSERVERS"].Value; got != strings.Join(endpoints, ",") {
			t.Errorf("trainer %d: PSGRAPH_PSERVERS %q, want the pservers' DNS names %q", i, got, strings.Join(endpoints, ","))
		}
		ct, _ := argOf(c, "--connect-timeout")
		if d, err := time.ParseDuration(ct); err != nil || d < 5*time.Minute {
			t.Errorf("trainer %d: --connect-timeout %q; pservers Pending for minutes (image pull, autoscaling) would fail the job", i, ct)
		}
		save, saves := argOf(c, "--save")
		if i == 0 {
			var claim string
			for _, vm := range c.VolumeMounts {
				if strings.HasPrefix(save, vm.MountPath+"/") {
					for _, v := range tmpl.Spec.Volumes {
						if v.Name == vm.Name && v.PersistentVolumeClaim != nil {
							claim = v.PersistentVolumeClaim.ClaimName
						}
					}
				}
			}
			if !saves || claim != k8s.ModelClaim(o.Name) {
				t.Errorf("trainer 0 saves to %q on claim %q, want a file on the claim %s", save, claim, k8s.ModelClaim(o.Name))
			}
		} else if saves {
			t.Errorf("trainer %d saves the model too (%s)", i, save)
		}
		// the state it holds, if any: checkpointed on its own claim
		dir, ckpt := argOf(c, "--checkpoint-dir")
		var claim string
		for _, vm := range c.VolumeMounts {
			if ckpt && vm.MountPath == dir {
				for _, v := range tmpl.Spec.Volumes {
					if v.Name == vm.Name && v.PersistentVolumeClaim != nil {
						claim = v.PersistentVolumeClaim.ClaimName
					}
				}
			}
		}
		switch {
		case ckpt && claim != k8s.TrainerCheckpointClaim(o.Name, i):
			t.Errorf("trainer %d holds %d bytes of state (online: %v) and checkpoints to %q on claim %q, want its own claim %s", i, held, p.Trainer.Data.IsOnline(), dir, claim, k8s.TrainerCheckpointClaim(o.Name, i))
		case ckpt:
			if every, _ := argOf(c, "--checkpoint-every"); every != strconv.Itoa(o.CheckpointEvery) {
				t.Errorf("trainer %d checkpoints every %q steps, the pservers every %d", i, every, o.CheckpointEvery)
			}
			if size := m.pvc[claim].Spec.Resources.Requests[corev1.ResourceStorage]; size.Value() < 3*held {
				t.Errorf("trainer %d's claim of %s cannot hold a checkpoint of its %d bytes", i, size.String(), held)
			}
		case ckpt:
			t.Errorf("trainer %d holds nothing and checkpoints to %q", i, dir)
		}
		dense := k8s.TrainersRestart(in) != ""
		if dense && (tmpl.Spec.RestartPolicy != corev1.RestartPolicyOnFailure || *job.Spec.BackoffLimit != int32(o.BackoffLimit)) ||
			!dense && (tmpl.Spec.RestartPolicy != corev1.RestartPolicyNever || *job.Spec.BackoffLimit != 0) {
			t.Errorf("trainer %d (tables: %v): restart %s, backoff %d", i, in.HasTables(), tmpl.Spec.RestartPolicy, *job.Spec.BackoffLimit)
		}
	}
	// names and labels the API server accepts: a Job's name becomes its
	// pods' job-name label (63 characters at most), a hostname a DNS label
	valid := func(what string, errs []string) {
		if len(errs) > 0 {
			t.Errorf("%s: %s", what, strings.Join(errs, "; "))
		}
	}
	labels := func(what string, l map[string]string) {
		for k, v := range l {
			valid(what+" label key "+k, validation.IsQualifiedName(k))
			valid(what+" label "+k+"="+v, validation.IsValidLabelValue(v))
		}
	}
	for name, j := range m.jobs {
		valid("Job "+name, validation.IsDNS1123Label(name))
		labels("Job "+name, j.Labels)
		labels("Job "+name+" pods", j.Spec.Template.Labels)
		if h := j.Spec.Template.Spec.Hostname; h != "" {
			valid("hostname "+h, validation.IsDNS1123Label(h))
		}
	}
	for name, c := range m.pvc {
		valid("claim "+name, validation.IsDNS1123Subdomain(name))
		labels("claim "+name, c.Labels)
	}
	valid("Service "+svc.Name, validation.IsDNS1035Label(svc.Name))
	valid("ConfigMap "+cm.Name, validation.IsDNS1123Subdomain(cm.Name))
	for k := range cm.Data {
		valid("ConfigMap key "+k, validation.IsConfigMapKey(k))
	}
	users := map[string][]string{} // claim -> the Jobs mounting it
	for _, j := range m.jobs {
		for _, v := range j.Spec.Template.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				users[v.PersistentVolumeClaim.ClaimName] = append(users[v.PersistentVolumeClaim.ClaimName], j.Name)
			}
		}
	}
	for name, c := range m.pvc {
		if len(users[name]) != 1 {
			t.Errorf("claim %s is mounted by %v; a ReadWriteOnce claim must belong to one pod", name, users[name])
		}
		if len(c.Spec.AccessModes) != 1 || c.Spec.AccessModes[0] != corev1.ReadWriteOnce || c.Namespace != o.Namespace {
			t.Errorf("claim %s: %v in %q; want one ReadWriteOnce claim per pod, in %q", name, c.Spec.AccessModes, c.Namespace, o.Namespace)
		}
	}
	if strings.Contains(m.header, "kind: Secret") {
		t.Error("the manifests must not create the Secret")
	}
}

func opts() k8s.Options {
	return k8s.Options{Image: "example.com/psgraph:1", Namespace: "ml", Name: "digits", Port: 7000, TokenSecret: "digits-token", TokenKey: "token", BackoffLimit: 6}
}

// TestManifests decodes the manifests of 1x1, 2x2 and 4x8 plans of digits
// strictly into their API types and checks that they make one job, with
// names and labels the API server accepts at the longest --name.
func TestManifests(t *testing.T) {
	for _, c := range []struct{ n, m, minBlock int }{{1, 1, partition.DefaultMinBlockSize}, {2, 2, partition.DefaultMinBlockSize}, {4, 8, 1024}} {
		t.Run(fmt.Sprintf("%dx%d", c.n, c.m), func(t *testing.T) {
			dir, p := writePlan(t, "../../../examples/digits-mlp.yaml", c.n, c.m, c.minBlock)
			o := opts()
			o.Name = "a-forty-character-job-name-of-the-limit0" // the longest --name
			o.TokenSecret = o.Name + "-token"
			src, warnings, err := k8s.Manifests(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) != 1 || !strings.Contains(warnings[0], "absolute path") {
				t.Errorf("a plan in an absolute directory reads absolute data paths; warnings: %q", warnings)
			}
			checkInvariants(t, o, p, decode(t, src))
		})
	}
}

// TestManifestsTableJob: a sync job with lookup tables cannot take a
// restarted trainer back, so its trainers get no retries; trainer 0's
// --save is the whole model (it pulls the tables from the pservers), so
// the pservers save no shards of their own.
func TestManifestsTableJob(t *testing.T) {
	dir, p := writePlan(t, "../../../testdata/sparse/emb-sgd.yaml", 2, 2, partition.DefaultMinBlockSize)
	if !p.Info.HasTables() {
		t.Fatal("emb-sgd has no table")
	}
	o := opts()
	src, _, err := k8s.Manifests(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, src)
	checkInvariants(t, o, p, m)
	for i := range 2 {
		c := m.jobs[k8s.PServerJob(o.Name, i)].Spec.Template.Spec.Containers[0]
		if save, ok := argOf(c, "--save"); ok {
			t.Errorf("pserver %d saves its shards to %q; trainer 0's file holds the tables", i, save)
		}
	}
}

// TestManifestsTrainerState: trainers that hold state of their own
// (bn-mlp's batch_norm statistics) checkpoint it, each to its own claim,
// at the pservers' steps; the invariants check it (and that the usual
// plan's trainers have no claim of their own).
func TestManifestsTrainerState(t *testing.T) {
	dir, p := writePlan(t, "../../../testdata/norm/bn-mlp.yaml", 2, 2, partition.DefaultMinBlockSize)
	if k8s.TrainerStateBytes(p) != 2*8*4 {
		t.Fatalf("bn-mlp's trainer holds %d bytes, want its two 8-float statistics", k8s.TrainerStateBytes(p))
	}
	trainerClaims(t, dir, p)
}

// trainerClaims checks the invariants of the plan's manifests and that
// each of its two trainers has a checkpoint claim.
func trainerClaims(t *testing.T, dir string, p *partition.Plan) {
	t.Helper()
	o := opts()
	o.Defaults()
	src, _, err := k8s.Manifests(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, src)
	checkInvariants(t, o, p, m)
	for i := range 2 {
		if m.pvc[k8s.TrainerCheckpointClaim(o.Name, i)] == nil {
			t.Errorf("no claim %s", k8s.TrainerCheckpointClaim(o.Name, i))
		}
	}
}

// TestManifestsOnlineTrainers: the trainers of a job reading Kafka
// checkpoint the stream's position, each to its own claim, at the
// pservers' steps, though they hold no state of their own.
func TestManifestsOnlineTrainers(t *testing.T) {
	model := filepath.Join(t.TempDir(), "online.yaml")
	src := `psgraph: 1
name: online
data:
  kafka: {brokers: ["kafka-0.kafka:9092"], topic: clicks}
  label: {name: y, column: 0}
  features: {name: x, columns: [1, 5]}
params:
  W: {shape: [4, 2]}
ops:
  - {type: matmul, inputs: [x, W], outputs: [z]}
  - {type: softmax_cross_entropy, inputs: [z, y], outputs: [loss]}
train: {loss: loss, batch: 16, optimizer: {type: sgd, lr: 0.1}}
`
	if err := os.WriteFile(model, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, p := writePlan(t, model, 2, 1, partition.DefaultMinBlockSize)
	if k8s.TrainerStateBytes(p) != 0 || !k8s.TrainersCheckpoint(p) {
		t.Fatalf("the online plan's trainers hold %d bytes and checkpoint: %v", k8s.TrainerStateBytes(p), k8s.TrainersCheckpoint(p))
	}
	trainerClaims(t, dir, p)
}

// TestManifestFlags: the flags reach the objects.
func TestManifestFlags(t *testing.T) {
	dir, p := writePlan(t, "../../../examples/digits-mlp.yaml", 2, 2, partition.DefaultMinBlockSize)
	o := opts()
	o.CPU, o.Memory, o.CheckpointSize, o.ModelSize, o.StorageClass = "500m", "3Gi", "20Gi", "5Gi", "fast-ssd"
	o.MetricsPort, o.ConnectTimeout, o.BackoffLimit = 9400, 20*time.Minute, 2
	src, _, err := k8s.Manifests(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, src)
	checkInvariants(t, o, p, m)
	for name, j := range m.jobs {
		c := j.Spec.Template.Spec.Containers[0]
		if c.Resources.Requests.Cpu().String() != "500m" || c.Resources.Limits.Memory().String() != "3Gi" {
			t.Errorf("%s: resources %v", name, c.Resources)
		}
		if port, _ := portOf(c, "metrics"); port != 9400 {
			t.Errorf("%s: metrics port %d", name, port)
		}
	}
	for name, c := range m.pvc {
		want := "20Gi"
		if name == k8s.ModelClaim(o.Name) {
			want = "5Gi"
		}
		if q := c.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse(want)) != 0 || c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != "fast-ssd" {
			t.Errorf("claim %s: %s of class %v, want %s of fast-ssd", name, q.String(), c.Spec.StorageClassName, want)
		}
	}
	if ct, _ := argOf(m.jobs[k8s.TrainerJob(o.Name, 1)].Spec.Template.Spec.Containers[0], "--connect-timeout"); ct != "20m0s" {
		t.Errorf("--connect-timeout %q", ct)
	}
}

func TestManifestErrors(t *testing.T) {
	ok := k8s.Options{Image: "img", Name: "job", Port: 7000, TokenSecret: "s", TokenKey: "token"}
	dir, _ := writePlan(t, "../../../examples/digits-mlp.yaml", 1, 1, partition.DefaultMinBlockSize)
	cases := []struct {
		name string
		edit func(*k8s.Options)
		dir  string
		want string
	}{
		{"no image", func(o *k8s.Options) { o.Image = "" }, dir, "--image is required"},
		{"bad name", func(o *k8s.Options) { o.Name = "My_Job" }, dir, `--name "My_Job" must be a DNS label`},
		{"bad port", func(o *k8s.Options) { o.Port = 0 }, dir, "--port 0"},
		{"metrics on the pserver port", func(o *k8s.Options) { o.MetricsPort = 7000 }, dir, "--metrics-port 7000 must be a TCP port other than --port 7000"},
		{"bad memory", func(o *k8s.Options) { o.Memory = "lots" }, dir, `--memory "lots" is not a positive Kubernetes quantity`},
		{"bad claim size", func(o *k8s.Options) { o.CheckpointSize = "-1Gi" }, dir, `--checkpoint-size "-1Gi"`},
		{"no plan", func(o *k8s.Options) {}, t.TempDir(), "plan.yaml: cannot read the plan"},
	}
	for _, c := range cases {
		o := ok
		c.edit(&o)
		_, _, err := k8s.Manifests(c.dir, o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// TestDockerfileShipsWhatManifestsRun: the image's binary is built from
// this module's main package, lands on the PATH the manifests' command
// "psgraph run" resolves in, and runs as the user the pods run as.
// (Building the image itself needs a container engine: docs/deploy.md
// says how it was checked.)
func TestDockerfileShipsWhatManifestsRun(t *testing.T) {
	b, err := os.ReadFile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"CGO_ENABLED=0 go build", "-o /out/psgraph .",
		"COPY --from=build /out/psgraph /usr/local/bin/psgraph",
		"USER 65534:65534",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	dir, _ := writePlan(t, "../../../examples/digits-mlp.yaml", 1, 1, partition.DefaultMinBlockSize)
	src, _, err := k8s.Manifests(dir, opts())
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range decode(t, src).jobs {
		sc := j.Spec.Template.Spec.SecurityContext
		if *sc.RunAsUser != 65534 || !bytes.Contains(b, []byte("USER "+strconv.Itoa(int(*sc.RunAsUser)))) {
			t.Errorf("Job %s runs as %d, the image as the Dockerfile's USER", j.Name, *sc.RunAsUser)
		}
	}
}

// TestTrainerMemoryLeavesTablesOut: a trainer fetches a lookup table's
// rows a batch at a time, so its default memory is the same for a table
// of 1M rows and of 50M rows (3.2 GB), and stays below what the pservers
// holding the table get; a pserver's memory grows with its shard.
func TestTrainerMemoryLeavesTablesOut(t *testing.T) {
	src, err := os.ReadFile("../../../examples/ctr.yaml")
	if err != nil {
		t.Fatal(err)
	}
	infos := map[int]partition.PlanInfo{}
	for _, rows := range []int{1_000_000, 50_000_000} {
		dir := t.TempDir()
		data := filepath.Join(dir, "ctr.tsv") // two rows in Criteo's format: label, 13 counts, 26 categories
		row := "1" + strings.Repeat("\t3", 13) + strings.Repeat("\t68fd1e64", 26) + "\n"
		if err := os.WriteFile(data, []byte(row+strings.Replace(row, "1", "0", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		y := strings.ReplaceAll(string(src), "1000000", strconv.Itoa(rows))
		y = strings.ReplaceAll(y, "csv: data/ctr.tsv", "csv: "+data)
		model := filepath.Join(dir, "ctr.yaml")
		if err := os.WriteFile(model, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		_, p := writePlan(t, model, 2, 2, partition.DefaultMinBlockSize)
		if !p.Info.HasTables() {
			t.Fatalf("%d rows: the plan shards no table", rows)
		}
		infos[rows] = p.Info
	}
	small, big := infos[1_000_000], infos[50_000_000]
	if a, b := k8s.TrainerMemory(small), k8s.TrainerMemory(big); a != b {
		t.Errorf("trainer memory %d MiB with a 1M-row table, %d MiB with 50M rows: want the same", a>>20, b>>20)
	}
	table := 0
	for _, pi := range big.Params {
		if pi.Table() {
			table += pi.Bytes
		}
	}
	if tm := k8s.TrainerMemory(big); tm >= int64(table) {
		t.Errorf("trainer memory %d MiB is not below the 50M-row table's %d MiB", tm>>20, table>>20)
	}
	for i := range 2 {
		if a, b := k8s.PServerMemory(small, i), k8s.PServerMemory(big, i); b <= a || b < int64(table/2) {
			t.Errorf("pserver %d: memory %d MiB (1M rows), %d MiB (50M rows): want it to grow with its %d MiB shard", i, a>>20, b>>20, table/2>>20)
		}
	}
}

// TestManifestsServeReplicas: --serve-replicas adds a Deployment of
// serving replicas that follow the job (psgraph serve on the model the
// plan was split from, resolved in the image like the plan's data, with
// the job's token and every pserver's address), ready on
// /v2/health/ready, and a Service in front of them; none by default.
func TestManifestsServeReplicas(t *testing.T) {
	dir, _ := writePlan(t, "../../../examples/digits-mlp.yaml", 2, 2, partition.DefaultMinBlockSize)
	// as psgraph split examples/digits-mlp.yaml -o plan/ from the
	// repository's root records the model: relative to the plan
	planFile := filepath.Join(dir, partition.PlanFileName)
	b, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	const source = `source: "../examples/digits-mlp.yaml"`
	if re := regexp.MustCompile(`(?m)^source: .*$`); re.Match(b) {
		b = re.ReplaceAll(b, []byte(source))
	} else {
		b = bytes.Replace(b, []byte("\nmodel: "), []byte("\n"+source+"\nmodel: "), 1)
	}
	if err := os.WriteFile(planFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := partition.ReadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	o := opts()
	src, _, err := k8s.Manifests(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if m := decode(t, src); len(m.deps) != 0 || m.svc[k8s.ServeName(o.Name)] != nil {
		t.Fatal("serving replicas without --serve-replicas")
	}
	o.ServeReplicas = 3
	src, _, err = k8s.Manifests(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, src)
	checkInvariants(t, o, p, m)
	d := m.deps[k8s.ServeName(o.Name)]
	if d == nil || *d.Spec.Replicas != 3 {
		t.Fatalf("no Deployment %s of 3 replicas: %v", k8s.ServeName(o.Name), m.deps)
	}
	c := d.Spec.Template.Spec.Containers[0]
	want := []string{"/psgraph/examples/digits-mlp.yaml", "--plan=/psgraph/plan", "--pserver-endpoints=" + strings.Join(k8s.PServerEndpoints(o, 2), ","), "--listen=0.0.0.0:8000"}
	if strings.Join(c.Command, " ") != "psgraph serve" || len(c.Args) < len(want) || strings.Join(c.Args[:len(want)], " ") != strings.Join(want, " ") {
		t.Errorf("the replica runs %v %v, want psgraph serve %v", c.Command, c.Args, want)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/v2/health/ready" || c.ReadinessProbe.HTTPGet.Port.StrVal != "http" || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8000 {
		t.Errorf("readiness %+v on ports %v, want /v2/health/ready on http 8000", c.ReadinessProbe.HTTPGet, c.Ports)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "PSGRAPH_TOKEN" || c.Env[0].ValueFrom.SecretKeyRef.Name != o.TokenSecret {
		t.Errorf("the replica's environment %v, want the job's token from %s", c.Env, o.TokenSecret)
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			t.Errorf("a replica mounts the claim %s; replicas hold nothing of their own", v.PersistentVolumeClaim.ClaimName)
		}
	}
	svc := m.svc[k8s.ServeName(o.Name)]
	if svc == nil || svc.Spec.Selector["app.kubernetes.io/component"] != "serve" || svc.Spec.Ports[0].TargetPort.StrVal != "http" {
		t.Fatalf("the Service %s: %+v", k8s.ServeName(o.Name), svc)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v || d.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("the Service selects %s=%s, which the replicas' pods do not carry", k, v)
		}
	}
}
