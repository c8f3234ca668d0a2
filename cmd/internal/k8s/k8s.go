// Package k8s renders Kubernetes manifests for a plan written by psgraph
// split, built from the Kubernetes API types: a ConfigMap with the plan
// files, a headless Service for the pservers, and for every node of the
// job its own Job (pservers with a checkpoint PersistentVolumeClaim each,
// trainer 0 with the claim its model is saved to), all configured through
// the PSGRAPH_* environment variables (docs/runtime.md). docs/deploy.md
// says why each object is what it is.
package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/partition"
)

// Options configure the manifests. Zero values of the optional fields
// take the defaults that Defaults fills in.
type Options struct {
	Image     string
	Namespace string // "" leaves it to kubectl's context
	Name      string // the job name, prefix of every object
	Port      int    // pservers listen on it
	// TokenSecret names an existing Secret holding the job's shared token
	// under the key TokenKey; the manifests reference it, never create it.
	TokenSecret, TokenKey string

	// MetricsPort is where every node serves /metrics, /healthz, /readyz.
	MetricsPort int
	// CPU is every node's CPU request (no CPU limit: a throttled pserver
	// stalls every trainer). Memory, when set, is every node's memory
	// request and limit; empty derives one per node from the plan's bytes.
	CPU, Memory string
	// CheckpointSize is each pserver's claim ("" derives it from its
	// bytes); CheckpointEvery its --checkpoint-every.
	CheckpointSize  string
	CheckpointEvery int
	// ModelSize is the claim trainer 0 saves the model to ("" derives it).
	ModelSize string
	// StorageClass of the claims ("" : the cluster's default class).
	StorageClass string
	// ConnectTimeout is the trainers' --connect-timeout: how long they wait
	// for pservers that are still being scheduled, or restarting.
	// TrainerTimeout is the pservers' --trainer-timeout: how long they wait
	// for a lost trainer to come back.
	ConnectTimeout, TrainerTimeout time.Duration
	// BackoffLimit is every Job's retries (container restarts in place
	// and replaced pods).
	BackoffLimit int
	// ServeReplicas is how many serving replicas follow the job (a
	// Deployment JOB-serve and a Service JOB-serve on ServePort; 0: none).
	ServeReplicas int
	ServePort     int
}

// Defaults of the optional options.
const (
	DefaultMetricsPort     = 9090
	DefaultCPU             = "1"
	DefaultCheckpointEvery = 500
	DefaultConnectTimeout  = 10 * time.Minute
	DefaultTrainerTimeout  = 5 * time.Minute
	DefaultBackoffLimit    = 6
	DefaultServePort       = 8000
)

// Mount points in every container.
const (
	PlanMount       = "/psgraph/plan"
	CheckpointMount = "/psgraph/checkpoint"
	ModelMount      = "/psgraph/model"
	TmpMount        = "/tmp"
)

// IndexLabel carries a node's index on its pod; the node reads it as
// PSGRAPH_INDEX through the downward API.
const IndexLabel = "psgraph.dev/index"

// uid is the unprivileged user the image runs as (the Dockerfile's USER).
const uid = 65534

// configMapLimit is Kubernetes' size limit of a ConfigMap's data.
const configMapLimit = 1 << 20

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Defaults fills the optional options left zero.
func (o *Options) Defaults() {
	if o.MetricsPort == 0 {
		o.MetricsPort = DefaultMetricsPort
	}
	if o.CPU == "" {
		o.CPU = DefaultCPU
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = DefaultCheckpointEvery
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.TrainerTimeout == 0 {
		o.TrainerTimeout = DefaultTrainerTimeout
	}
	if o.ServePort == 0 {
		o.ServePort = DefaultServePort
	}
}

// Validate checks the options, naming the flag at fault.
func (o Options) Validate() error {
	o.Defaults()
	quantity := func(flag, v string) error {
		if v == "" {
			return nil
		}
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() <= 0 {
			return fmt.Errorf("%s %q is not a positive Kubernetes quantity (e.g. 500m, 2, 512Mi, 10Gi)", flag, v)
		}
		return nil
	}
	switch {
	case o.Image == "":
		return fmt.Errorf("--image is required: the container image holding psgraph (see the Dockerfile)")
	case !dnsLabel.MatchString(o.Name) || len(o.Name) > 40:
		return fmt.Errorf("--name %q must be a DNS label of at most 40 characters (lowercase letters, digits, '-'), since pods are named %s-pserver-<i>", o.Name, o.Name)
	case o.Namespace != "" && !dnsLabel.MatchString(o.Namespace):
		return fmt.Errorf("--namespace %q is not a valid namespace name", o.Namespace)
	case o.Port < 1 || o.Port > 65535:
		return fmt.Errorf("--port %d is not a TCP port", o.Port)
	case o.MetricsPort < 1 || o.MetricsPort > 65535 || o.MetricsPort == o.Port:
		return fmt.Errorf("--metrics-port %d must be a TCP port other than --port %d", o.MetricsPort, o.Port)
	case o.TokenSecret == "" || o.TokenKey == "":
		return fmt.Errorf("--token-secret and --token-key must name the Secret holding the job's token")
	case o.CheckpointEvery < 0:
		return fmt.Errorf("--checkpoint-every %d must be positive", o.CheckpointEvery)
	case o.BackoffLimit < 0:
		return fmt.Errorf("--backoff-limit %d must be 0 or more", o.BackoffLimit)
	case o.ServeReplicas < 0:
		return fmt.Errorf("--serve-replicas %d must be 0 or more", o.ServeReplicas)
	case o.ServePort < 1 || o.ServePort > 65535 || o.ServePort == o.Port || o.ServePort == o.MetricsPort:
		return fmt.Errorf("--serve-port %d must be a TCP port other than --port and --metrics-port", o.ServePort)
	case o.ConnectTimeout < 0 || o.TrainerTimeout < 0:
		return fmt.Errorf("--connect-timeout and --trainer-timeout must be positive")
	case o.StorageClass != "" && !dnsLabel.MatchString(o.StorageClass) && !regexp.MustCompile(`^[a-z0-9.-]+$`).MatchString(o.StorageClass):
		return fmt.Errorf("--storage-class %q is not a StorageClass name", o.StorageClass)
	}
	return firstErr(quantity("--cpu", o.CPU), quantity("--memory", o.Memory),
		quantity("--checkpoint-size", o.CheckpointSize), quantity("--model-size", o.ModelSize))
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// PServerJob names pserver i's Job; its pod's hostname is the same.
func PServerJob(job string, i int) string { return fmt.Sprintf("%s-pserver-%d", job, i) }

// TrainerJob names trainer i's Job.
func TrainerJob(job string, i int) string { return fmt.Sprintf("%s-trainer-%d", job, i) }

// PServerHost is the stable DNS name of pserver i: its pod's hostname
// under the headless Service (named after the job).
func PServerHost(job string, i int) string { return PServerJob(job, i) + "." + job }

// PServerEndpoints lists host:port of every pserver, as trainers get them.
func PServerEndpoints(o Options, pservers int) []string {
	eps := make([]string, pservers)
	for i := range eps {
		eps[i] = PServerHost(o.Name, i) + ":" + strconv.Itoa(o.Port)
	}
	return eps
}

// CheckpointClaim names pserver i's checkpoint claim; ModelClaim the
// claim trainer 0 saves to; ModelFile the file in it.
func CheckpointClaim(job string, i int) string { return PServerJob(job, i) + "-checkpoint" }
func ModelClaim(job string) string             { return job + "-model" }
func ModelFile(job string) string              { return ModelMount + "/" + job + ".safetensors" }

// TrainerCheckpointClaim names trainer i's checkpoint claim, which only
// a trainer that checkpoints has (TrainersCheckpoint).
func TrainerCheckpointClaim(job string, i int) string { return TrainerJob(job, i) + "-checkpoint" }

// TrainerStateBytes is the size of the persistent variables a trainer of
// the plan holds (batch_norm's running statistics, a parameter placed on
// the trainer: docs/split.md), which it checkpoints itself; 0 for the
// usual plan, whose trainers hold none.
func TrainerStateBytes(p *partition.Plan) int64 {
	var b int64
	for _, n := range p.Trainer.Persistent() {
		v := p.Trainer.Vars[n]
		b += int64(v.DType.Size()) * int64(v.Shape.Numel())
	}
	return b
}

// TrainersCheckpoint says whether the plan's trainers checkpoint, each on
// a claim of its own: when they hold state of their own
// (TrainerStateBytes), and when they read an online source, whose
// position each trainer's checkpoints hold (docs/streaming.md).
func TrainersCheckpoint(p *partition.Plan) bool {
	return TrainerStateBytes(p) > 0 || p.Trainer.Data.IsOnline()
}

// absoluteCSV finds a data path the trainer reads from the machine that split.
var absoluteCSV = regexp.MustCompile(`(?m)^\s*csv:\s*"?(/[^"\n]*)`)

// Memory a node needs beyond its tensors: the Go runtime, the binary, the
// transport's buffers (64 KiB read-ahead per transfer, 4 MiB windows).
const (
	pserverBase = 96 << 20
	trainerBase = 256 << 20
	claimMin    = 1 << 30 // many provisioners round smaller claims up to 1 GiB
)

// PServerMemory is the default memory of pserver p of the plan: its
// blocks B_p held as the parameters, up to two optimizer moments, the
// gradient sum and the streamed update's chunks, and one gradient piece per
// trainer in flight, twice for headroom: 2*(4+N)*B_p, plus pserverBase.
func PServerMemory(in partition.PlanInfo, p int) int64 {
	return roundMi(pserverBase + 2*int64(4+in.Trainers)*int64(in.Load[p].Bytes))
}

// TrainerMemory is the default memory of a trainer: every parameter it
// holds whole (B_d: all but the lookup tables), its gradient, and the
// model's activations (bounded here by the parameters again), twice:
// 6*B_d; a lookup table's rows come a batch at a time, so what a step
// moves of the tables (R: the largest payload of each of their transfers)
// counts instead of the tables, four times (the fetched rows, their
// gradient, and the pserver's reply and request buffers); plus
// trainerBase (the data set of a non-streamed model is in memory too:
// raise --memory for a large one). Trainer 0's --save streams the tables
// to its file through buffers of at most 1 MiB, so their size never
// counts.
func TrainerMemory(in partition.PlanInfo) int64 {
	dense := 0
	for i := range in.Params {
		if !in.Params[i].Table() {
			dense += in.Params[i].Bytes
		}
	}
	return roundMi(trainerBase + 6*int64(dense) + 4*int64(tableStepBytes(in)))
}

// tableStepBytes is the most a step moves of the lookup tables between a
// trainer and the pservers: the largest payload of every transfer of ids,
// rows or row gradients (the transfers whose size varies, at_most).
func tableStepBytes(in partition.PlanInfo) int {
	b := 0
	for _, tr := range in.Transfers {
		if !tr.AtMost {
			continue
		}
		n := 1
		for _, d := range tr.Shape {
			n *= d
		}
		switch tr.DType {
		case "i64":
			b += 8 * n
		case "rows": // values, and an id of at most 8 bytes beside each row
			b += 4 * n
			if len(tr.Shape) > 0 {
				b += 8 * tr.Shape[0]
			}
		default:
			b += 4 * n
		}
	}
	return b
}

// CheckpointBytes is the default claim of pserver p: the two checkpoints
// kept, each the blocks and up to two optimizer moments (3*B_p), twice
// for the temporary file a save writes before it renames: 12*B_p, at
// least 1 GiB.
func CheckpointBytes(in partition.PlanInfo, p int) int64 {
	return roundMi(max(claimMin, 12*int64(in.Load[p].Bytes)))
}

// ModelBytes is the default model claim: the model twice, at least 1 GiB.
func ModelBytes(in partition.PlanInfo) int64 { return roundMi(max(claimMin, 2*int64(totalBytes(in)))) }

func totalBytes(in partition.PlanInfo) int {
	b := 0
	for _, l := range in.Load {
		b += l.Bytes
	}
	return b
}

func roundMi(b int64) int64 { return (b + 1<<20 - 1) &^ (1<<20 - 1) }

func quantity(s string, def int64) resource.Quantity {
	if s != "" {
		return resource.MustParse(s)
	}
	return *resource.NewQuantity(def, resource.BinarySI)
}

// Objects reads the plan in dir and returns the job's objects, in the
// order kubectl should create them, and warnings about what the image
// must provide.
func Objects(dir string, o Options) ([]runtime.Object, []string, error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	o.Defaults()
	p, err := partition.ReadPlan(dir)
	if err != nil {
		return nil, nil, err
	}
	files := map[string]string{}
	size := 0
	for _, name := range append([]string{partition.PlanFileName, p.Info.Files.Trainer}, p.Info.Files.PServers...) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
		}
		files[name] = string(b)
		size += len(b)
	}
	if size > configMapLimit {
		return nil, nil, fmt.Errorf("%s: the plan files hold %d bytes, more than a ConfigMap's 1 MiB; copy the plan directory into the image and drop the ConfigMap volume (docs/deploy.md)", dir, size)
	}
	var warnings []string
	if mt := absoluteCSV.FindStringSubmatch(files[p.Info.Files.Trainer]); mt != nil {
		warnings = append(warnings, fmt.Sprintf("%s reads its data from the absolute path %s, which must exist in the image; split with a relative -o (e.g. from the repository root: -o plan/) so the path is relative to %s", filepath.Join(dir, p.Info.Files.Trainer), mt[1], PlanMount))
	}
	objs := []runtime.Object{configMap(o, files), service(o)}
	for i := range p.Info.PServers {
		objs = append(objs, claim(o, CheckpointClaim(o.Name, i), "pserver", quantity(o.CheckpointSize, CheckpointBytes(p.Info, i))), pserverJob(o, p.Info, i))
	}
	objs = append(objs, claim(o, ModelClaim(o.Name), "trainer", quantity(o.ModelSize, ModelBytes(p.Info))))
	held, ckpt := TrainerStateBytes(p), TrainersCheckpoint(p)
	for i := range p.Info.Trainers {
		if ckpt {
			objs = append(objs, claim(o, TrainerCheckpointClaim(o.Name, i), "trainer", quantity("", roundMi(max(claimMin, 12*held)))))
		}
		objs = append(objs, trainerJob(o, p.Info, i, ckpt))
	}
	if o.ServeReplicas > 0 {
		model := p.Info.Source
		switch {
		case model == "":
			return nil, nil, fmt.Errorf("%s: the plan does not name its model file, which the serving replicas load; split again with psgraph split (it records the model's path)", dir)
		case filepath.IsAbs(model):
			warnings = append(warnings, fmt.Sprintf("the serving replicas load the model %s, an absolute path that must exist in the image; split with a relative -o so the path is relative to %s", model, PlanMount))
		default: // relative to the plan, which the pods mount at PlanMount
			model = path.Clean(PlanMount + "/" + filepath.ToSlash(model))
		}
		objs = append(objs, serveService(o), serveDeployment(o, p.Info, model))
	}
	return objs, warnings, nil
}

// ServeName names the serving replicas' Deployment and Service.
func ServeName(job string) string { return job + "-serve" }

// ServeMemory is a serving replica's memory: the model (its tables once,
// its dense parameters twice: the shadow a step's update is written to)
// and 128 MiB for its programs, requests and runtime.
func ServeMemory(in partition.PlanInfo) int64 {
	dense := 0
	for i := range in.Params {
		if !in.Params[i].Table() {
			dense += in.Params[i].Bytes
		}
	}
	return roundMi(int64(totalBytes(in)+dense) + 128<<20)
}

// serveService is the serving replicas' Service: inference requests and
// /metrics on ServePort.
func serveService(o Options) *corev1.Service {
	return &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: o.meta(ServeName(o.Name), "serve", -1),
		Spec: corev1.ServiceSpec{
			Selector: o.labels("serve", -1),
			Ports:    []corev1.ServicePort{{Name: "http", Port: int32(o.ServePort), TargetPort: intstr.FromString("http")}},
		}}
}

// serveDeployment runs the serving replicas (psgraph serve --plan): each
// follows the job's pservers and is ready (/v2/health/ready) once caught
// up; after the job they serve its last step. They are interchangeable,
// so a Deployment restarts or replaces them, and each catches up on its
// own (docs/serving.md).
func serveDeployment(o Options, in partition.PlanInfo, model string) *appsv1.Deployment {
	c := corev1.Container{Name: "serve",
		Args: []string{model, "--plan=" + PlanMount, "--pserver-endpoints=" + strings.Join(PServerEndpoints(o, in.PServers), ","),
			"--listen=0.0.0.0:" + strconv.Itoa(o.ServePort), "--log-format=json"},
		Env: []corev1.EnvVar{{Name: "PSGRAPH_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.TokenSecret}, Key: o.TokenKey}}}},
		Resources: resources(o.CPU, quantity(o.Memory, ServeMemory(in))),
	}
	tmpl := o.pod("serve", -1, c, corev1.RestartPolicyAlways)
	sc := &tmpl.Spec.Containers[0]
	sc.Command = []string{"psgraph", "serve"}
	sc.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: int32(o.ServePort)}}
	get := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
			PeriodSeconds: period, TimeoutSeconds: 2, FailureThreshold: failures}
	}
	sc.ReadinessProbe, sc.LivenessProbe = get("/v2/health/ready", 2, 1), get("/v2/health/live", 10, 6)
	tmpl.Annotations["prometheus.io/port"] = strconv.Itoa(o.ServePort)
	n := int32(o.ServeReplicas)
	return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: o.meta(ServeName(o.Name), "serve", -1),
		Spec:       appsv1.DeploymentSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: o.labels("serve", -1)}, Template: tmpl}}
}

// Manifests returns Objects as multi-document YAML for kubectl apply.
func Manifests(dir string, o Options) ([]byte, []string, error) {
	objs, warnings, err := Objects(dir, o)
	if err != nil {
		return nil, nil, err
	}
	o.Defaults()
	p, err := partition.ReadPlan(dir)
	if err != nil {
		return nil, nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# psgraph job %q from %s: %d pservers, %d trainers (%s); docs/deploy.md.\n", o.Name, dir, p.Info.PServers, p.Info.Trainers, p.Info.Mode)
	fmt.Fprintf(&b, "# Needs the Secret %q with key %q: kubectl create secret generic %s --from-literal=%s=$(head -c 32 /dev/urandom | base64)\n", o.TokenSecret, o.TokenKey, o.TokenSecret, o.TokenKey)
	fmt.Fprintf(&b, "# Watch: kubectl get jobs,pods -l app.kubernetes.io/instance=%s; the model: %s on the claim %s.\n", o.Name, ModelFile(o.Name), ModelClaim(o.Name))
	for _, obj := range objs {
		y, err := marshal(obj)
		if err != nil {
			return nil, nil, err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), warnings, nil
}

// marshal writes obj as YAML without what only the API server fills in
// (status, creationTimestamp), which the Go types always carry.
func marshal(obj runtime.Object) ([]byte, error) {
	js, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	for _, md := range []any{m["metadata"], dig(m, "spec", "template", "metadata")} {
		if md, ok := md.(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
	}
	return yaml.Marshal(m)
}

func dig(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func (o Options) meta(name, component string, index int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: o.labels(component, index)}
}

// labels of an object; index < 0 for an object of no one node.
func (o Options) labels(component string, index int) map[string]string {
	l := map[string]string{"app.kubernetes.io/name": "psgraph", "app.kubernetes.io/instance": o.Name}
	if component != "" {
		l["app.kubernetes.io/component"] = component
	}
	if index >= 0 {
		l[IndexLabel] = strconv.Itoa(index)
	}
	return l
}

func configMap(o Options, files map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: o.meta(o.Name+"-plan", "", -1), Data: files}
}

func service(o Options) *corev1.Service {
	return &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: o.meta(o.Name, "pserver", -1),
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			// A trainer must resolve a pserver before it is ready: a
			// restarted pserver's DNS name should come back at once.
			PublishNotReadyAddresses: true,
			Selector:                 o.labels("pserver", -1),
			Ports: []corev1.ServicePort{
				{Name: "psgraph", Port: int32(o.Port), TargetPort: intstr.FromString("psgraph")},
				{Name: "metrics", Port: int32(o.MetricsPort), TargetPort: intstr.FromString("metrics")},
			},
		}}
}

func claim(o Options, name, component string, size resource.Quantity) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: o.meta(name, component, -1),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		}}
	if o.StorageClass != "" {
		c.Spec.StorageClassName = &o.StorageClass
	}
	return c
}

func envValue(name, v string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: v} }

// env is what every node reads (docs/runtime.md); the index comes from the
// pod's own IndexLabel through the downward API.
func (o Options) env(role string, extra ...corev1.EnvVar) []corev1.EnvVar {
	e := []corev1.EnvVar{
		envValue("PSGRAPH_ROLE", role),
		{Name: "PSGRAPH_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.labels['" + IndexLabel + "']"}}},
		envValue("PSGRAPH_PLAN", PlanMount),
		{Name: "PSGRAPH_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.TokenSecret}, Key: o.TokenKey}}},
		envValue("PSGRAPH_METRICS_ADDR", "0.0.0.0:"+strconv.Itoa(o.MetricsPort)),
	}
	return append(e, extra...)
}

func probe(path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("metrics")}},
		PeriodSeconds: period, TimeoutSeconds: 2, FailureThreshold: failures}
}

// pod is the pod template of one node.
func (o Options) pod(component string, index int, c corev1.Container, restart corev1.RestartPolicy, volumes ...corev1.Volume) corev1.PodTemplateSpec {
	c.Image = o.Image
	c.Command = []string{"psgraph", "run"}
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: "metrics", ContainerPort: int32(o.MetricsPort)})
	c.ReadinessProbe = probe(metrics.ReadyPath, 5, 1)
	// A node's HTTP server answers from its start to its end, whatever it
	// waits for; failing a minute means the process is wedged.
	c.LivenessProbe = probe(metrics.LivePath, 10, 6)
	no, yes := false, true
	c.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	c.VolumeMounts = append([]corev1.VolumeMount{
		{Name: "plan", MountPath: PlanMount, ReadOnly: true},
		{Name: "tmp", MountPath: TmpMount},
	}, c.VolumeMounts...)
	user := int64(uid)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: o.labels(component, index), Annotations: map[string]string{
			"prometheus.io/scrape": "true",
			"prometheus.io/port":   strconv.Itoa(o.MetricsPort),
			"prometheus.io/path":   metrics.MetricsPath,
		}},
		Spec: corev1.PodSpec{
			RestartPolicy: restart,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &user, RunAsGroup: &user,
				// the claims are writable by the image's user
				FSGroup: &user, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{c},
			Volumes: append([]corev1.Volume{
				{Name: "plan", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: o.Name + "-plan"}}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			}, volumes...),
		},
	}
}

func resources(cpu string, memory resource.Quantity) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: memory},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: memory},
	}
}

func claimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func (o Options) job(name, component string, index int, backoff int32, tmpl corev1.PodTemplateSpec) *batchv1.Job {
	one := int32(1)
	return &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: o.meta(name, component, index),
		Spec:       batchv1.JobSpec{Completions: &one, Parallelism: &one, BackoffLimit: &backoff, Template: tmpl}}
}

// pserverJob runs pserver i until every trainer is done: it exits 0 then,
// and its Job completes. A crash restarts the container in its pod
// (OnFailure); a lost pod is replaced with the same hostname and claim.
// Either way the pserver restores its newest checkpoint and rejoins the
// running trainers (docs/runtime.md, "A restarted pserver").
func pserverJob(o Options, in partition.PlanInfo, i int) *batchv1.Job {
	args := []string{
		"--checkpoint-dir=" + CheckpointMount,
		"--checkpoint-every=" + strconv.Itoa(o.CheckpointEvery),
		"--trainer-timeout=" + o.TrainerTimeout.String(),
		"--log-format=json",
	}
	c := corev1.Container{Name: "pserver", Args: args,
		Env:          o.env("pserver", envValue("PSGRAPH_LISTEN", "0.0.0.0:"+strconv.Itoa(o.Port))),
		Ports:        []corev1.ContainerPort{{Name: "psgraph", ContainerPort: int32(o.Port)}},
		Resources:    resources(o.CPU, quantity(o.Memory, PServerMemory(in, i))),
		VolumeMounts: []corev1.VolumeMount{{Name: "checkpoint", MountPath: CheckpointMount}},
	}
	tmpl := o.pod("pserver", i, c, corev1.RestartPolicyOnFailure, claimVolume("checkpoint", CheckpointClaim(o.Name, i)))
	// DNS: PServerHost, through the headless Service
	tmpl.Spec.Hostname, tmpl.Spec.Subdomain = PServerJob(o.Name, i), o.Name
	return o.job(PServerJob(o.Name, i), "pserver", i, int32(o.BackoffLimit), tmpl)
}

// trainerJob runs trainer i; trainer 0 saves the model to the model claim.
// A trainer holding state of its own (checkpoints) checkpoints it to its
// claim at the pservers' steps, and a restarted one restores its newest
// checkpoint at or before the step it rejoins at.
// A restarted trainer rejoins a dense job (it learns the running step from
// the pservers), so trainers restart in place (OnFailure); a sync job with
// lookup tables cannot take one back (the pservers stop the job), so its
// trainers get no retries.
func trainerJob(o Options, in partition.PlanInfo, i int, checkpoints bool) *batchv1.Job {
	args := []string{"--connect-timeout=" + o.ConnectTimeout.String(), "--log-format=json"}
	var vols []corev1.Volume
	c := corev1.Container{Name: "trainer",
		Env:       o.env("trainer", envValue("PSGRAPH_PSERVERS", strings.Join(PServerEndpoints(o, in.PServers), ","))),
		Resources: resources(o.CPU, quantity(o.Memory, TrainerMemory(in))),
	}
	if i == 0 {
		args = append(args, "--save="+ModelFile(o.Name))
		c.VolumeMounts = []corev1.VolumeMount{{Name: "model", MountPath: ModelMount}}
		vols = append(vols, claimVolume("model", ModelClaim(o.Name)))
	}
	if checkpoints {
		args = append(args, "--checkpoint-dir="+CheckpointMount, "--checkpoint-every="+strconv.Itoa(o.CheckpointEvery))
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "checkpoint", MountPath: CheckpointMount})
		vols = append(vols, claimVolume("checkpoint", TrainerCheckpointClaim(o.Name, i)))
	}
	c.Args = args
	restart, backoff := corev1.RestartPolicyOnFailure, int32(o.BackoffLimit)
	if TrainersRestart(in) == "" {
		restart, backoff = corev1.RestartPolicyNever, 0
	}
	return o.job(TrainerJob(o.Name, i), "trainer", i, backoff, o.pod("trainer", i, c, restart, vols...))
}

// TrainersRestart says why the plan's trainers may be restarted, or ""
// when a restarted trainer cannot rejoin (a sync job with lookup tables).
func TrainersRestart(in partition.PlanInfo) string {
	if in.HasTables() && in.Mode == partition.Sync {
		return ""
	}
	return "a restarted trainer rejoins the running job"
}
