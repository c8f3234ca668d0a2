package k8s_test

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/psgraph/psgraph/cmd/internal/k8s"
	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/partition"
)

func writePlan(t *testing.T, trainers, pservers int) string {
	t.Helper()
	g, err := dsl.Load("../../../examples/digits-mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := partition.Split(g, partition.Options{Trainers: trainers, PServers: pservers, Mode: partition.Sync, MinBlockSize: partition.DefaultMinBlockSize})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "plan")
	if err := p.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string
	Metadata   struct {
		Name, Namespace string
		Labels          map[string]string
	}
	Data map[string]string
	Spec struct {
		ClusterIP           string `yaml:"clusterIP"`
		ServiceName         string `yaml:"serviceName"`
		Replicas            int
		PodManagementPolicy string `yaml:"podManagementPolicy"`
		CompletionMode      string `yaml:"completionMode"`
		Completions         int
		Parallelism         int
		Selector            map[string]any
		Template            struct {
			Metadata struct{ Labels map[string]string }
			Spec     struct {
				RestartPolicy string `yaml:"restartPolicy"`
				Containers    []struct {
					Image   string
					Command []string
					Env     []struct {
						Name      string
						Value     string
						ValueFrom struct {
							SecretKeyRef struct{ Name, Key string } `yaml:"secretKeyRef"`
						} `yaml:"valueFrom"`
					}
					VolumeMounts []struct {
						Name      string
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				}
				Volumes []struct {
					Name      string
					ConfigMap struct{ Name string } `yaml:"configMap"`
				}
			}
		}
	}
}

func parse(t *testing.T, src []byte) map[string]object {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(src))
	out := map[string]object{}
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("manifests do not parse: %v\n%s", err, src)
		}
		if _, dup := out[o.Kind]; dup {
			t.Fatalf("two objects of kind %s", o.Kind)
		}
		out[o.Kind] = o
	}
	return out
}

func env(t *testing.T, o object) map[string]string {
	t.Helper()
	cs := o.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%s has %d containers, want 1", o.Kind, len(cs))
	}
	e := map[string]string{}
	for _, v := range cs[0].Env {
		e[v.Name] = v.Value
		if r := v.ValueFrom.SecretKeyRef; r.Name != "" {
			e[v.Name] = "secret:" + r.Name + "/" + r.Key
		}
	}
	return e
}

func TestManifests(t *testing.T) {
	dir := writePlan(t, 3, 2)
	opt := k8s.Options{Image: "example.com/psgraph:1", Namespace: "ml", Name: "digits", Port: 7000, TokenSecret: "digits-token", TokenKey: "token"}
	src, warnings, err := k8s.Manifests(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "absolute path") {
		t.Errorf("a plan in an absolute directory reads absolute data paths; warnings: %q", warnings)
	}
	objs := parse(t, src)
	if len(objs) != 4 {
		t.Fatalf("got kinds %v, want ConfigMap, Service, StatefulSet, Job", objs)
	}
	for kind, o := range objs {
		if o.Metadata.Namespace != "ml" {
			t.Errorf("%s namespace %q, want ml", kind, o.Metadata.Namespace)
		}
		if kind == "Secret" {
			t.Error("the manifests must not create the Secret")
		}
	}
	cm := objs["ConfigMap"]
	for _, f := range []string{"plan.yaml", "trainer.yaml", "pserver-0.yaml", "pserver-1.yaml"} {
		if !strings.Contains(cm.Data[f], "psgraph") {
			t.Errorf("ConfigMap lacks %s", f)
		}
	}
	svc := objs["Service"]
	if svc.Spec.ClusterIP != "None" || svc.Metadata.Name != "digits" {
		t.Errorf("Service %s clusterIP %q, want the headless Service digits", svc.Metadata.Name, svc.Spec.ClusterIP)
	}
	ss := objs["StatefulSet"]
	if ss.Spec.Replicas != 2 || ss.Spec.ServiceName != svc.Metadata.Name || ss.Metadata.Name != "digits-pserver" {
		t.Errorf("StatefulSet %s: %d replicas under %q, want digits-pserver, 2 under digits", ss.Metadata.Name, ss.Spec.Replicas, ss.Spec.ServiceName)
	}
	for k, v := range svc.Spec.Selector {
		if ss.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the Service selects %s=%v, which the pserver pods lack", k, v)
		}
	}
	job := objs["Job"]
	if job.Spec.CompletionMode != "Indexed" || job.Spec.Completions != 3 || job.Spec.Parallelism != 3 {
		t.Errorf("Job: %s, completions %d, parallelism %d; want Indexed, 3, 3", job.Spec.CompletionMode, job.Spec.Completions, job.Spec.Parallelism)
	}
	pe, te := env(t, ss), env(t, job)
	for role, e := range map[string]map[string]string{"pserver": pe, "trainer": te} {
		if e["PSGRAPH_ROLE"] != role || e["PSGRAPH_PLAN"] != k8s.PlanMount || e["PSGRAPH_TOKEN"] != "secret:digits-token/token" {
			t.Errorf("%s env %v", role, e)
		}
	}
	if pe["PSGRAPH_LISTEN"] != "0.0.0.0:7000" {
		t.Errorf("pserver listens on %q", pe["PSGRAPH_LISTEN"])
	}
	// the trainers' endpoint list is the pods' DNS names under the Service
	var want []string
	for i := range ss.Spec.Replicas {
		want = append(want, ss.Metadata.Name+"-"+string(rune('0'+i))+"."+svc.Metadata.Name+":7000")
	}
	if got := te["PSGRAPH_PSERVERS"]; got != strings.Join(want, ",") {
		t.Errorf("PSGRAPH_PSERVERS = %q, want %q", got, strings.Join(want, ","))
	}
	for kind, o := range map[string]object{"StatefulSet": ss, "Job": job} {
		c := o.Spec.Template.Spec.Containers[0]
		if c.Image != opt.Image {
			t.Errorf("%s image %q", kind, c.Image)
		}
		if len(c.Command) != 3 || c.Command[0] != "sh" || !strings.Contains(c.Command[2], "PSGRAPH_INDEX=") || !strings.HasSuffix(c.Command[2], "exec psgraph run") {
			t.Errorf("%s command %q does not set PSGRAPH_INDEX and exec psgraph run", kind, c.Command)
		}
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != k8s.PlanMount || o.Spec.Template.Spec.Volumes[0].ConfigMap.Name != cm.Metadata.Name {
			t.Errorf("%s does not mount the plan ConfigMap at %s", kind, k8s.PlanMount)
		}
	}
	if !strings.Contains(ss.Spec.Template.Spec.Containers[0].Command[2], "${HOSTNAME##*-}") ||
		!strings.Contains(job.Spec.Template.Spec.Containers[0].Command[2], "$JOB_COMPLETION_INDEX") {
		t.Error("pserver index must come from the hostname ordinal, trainer index from JOB_COMPLETION_INDEX")
	}
	if job.Spec.Template.Spec.RestartPolicy != "Never" {
		t.Errorf("trainer restartPolicy %q, want Never", job.Spec.Template.Spec.RestartPolicy)
	}
}

func TestManifestErrors(t *testing.T) {
	ok := k8s.Options{Image: "img", Name: "job", Port: 7000, TokenSecret: "s", TokenKey: "token"}
	cases := []struct {
		name string
		edit func(*k8s.Options)
		dir  string
		want string
	}{
		{"no image", func(o *k8s.Options) { o.Image = "" }, "", "--image is required"},
		{"bad name", func(o *k8s.Options) { o.Name = "My_Job" }, "", `--name "My_Job" must be a DNS label`},
		{"bad port", func(o *k8s.Options) { o.Port = 0 }, "", "--port 0"},
		{"no plan", func(o *k8s.Options) {}, t.TempDir(), "plan.yaml: cannot read the plan"},
	}
	for _, c := range cases {
		o := ok
		c.edit(&o)
		dir := c.dir
		if dir == "" {
			dir = writePlan(t, 1, 1)
		}
		_, _, err := k8s.Manifests(dir, o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}
