// Package k8s renders Kubernetes manifests for a plan written by
// psgraph split: a ConfigMap with the plan files, a headless Service and a
// StatefulSet of pservers, and an Indexed Job of trainers, all configured
// through the PSGRAPH_* environment variables (docs/runtime.md).
package k8s

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/psgraph/psgraph/partition"
)

// Options configure the manifests.
type Options struct {
	Image     string
	Namespace string // "" leaves it to kubectl's context
	Name      string // the job name, prefix of every object
	Port      int    // pservers listen on it
	// TokenSecret names an existing Secret holding the job's shared token
	// under the key TokenKey; the manifests reference it, never create it.
	TokenSecret, TokenKey string
}

// PlanMount is where the ConfigMap with the plan files is mounted.
const PlanMount = "/psgraph/plan"

// configMapLimit is Kubernetes' size limit of a ConfigMap's data.
const configMapLimit = 1 << 20

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Validate checks the options, naming the flag at fault.
func (o Options) Validate() error {
	switch {
	case o.Image == "":
		return fmt.Errorf("--image is required: the container image holding psgraph (see the Dockerfile)")
	case !dnsLabel.MatchString(o.Name) || len(o.Name) > 40:
		return fmt.Errorf("--name %q must be a DNS label of at most 40 characters (lowercase letters, digits, '-'), since pods are named %s-pserver-<i>", o.Name, o.Name)
	case o.Namespace != "" && !dnsLabel.MatchString(o.Namespace):
		return fmt.Errorf("--namespace %q is not a valid namespace name", o.Namespace)
	case o.Port < 1 || o.Port > 65535:
		return fmt.Errorf("--port %d is not a TCP port", o.Port)
	case o.TokenSecret == "" || o.TokenKey == "":
		return fmt.Errorf("--token-secret and --token-key must name the Secret holding the job's token")
	}
	return nil
}

// PServerHost is the stable DNS name of pserver i: its pod's hostname under
// the headless Service.
func PServerHost(job string, i int) string { return fmt.Sprintf("%s-pserver-%d.%s", job, i, job) }

// PServerEndpoints lists host:port of every pserver, as trainers get them.
func PServerEndpoints(o Options, pservers int) []string {
	eps := make([]string, pservers)
	for i := range eps {
		eps[i] = PServerHost(o.Name, i) + ":" + strconv.Itoa(o.Port)
	}
	return eps
}

// absoluteCSV finds a data path the trainer reads from the machine that split.
var absoluteCSV = regexp.MustCompile(`(?m)^\s*csv:\s*"?(/[^"\n]*)`)

// Manifests reads the plan in dir and returns the multi-document YAML, and
// warnings about what the image must provide.
func Manifests(dir string, o Options) ([]byte, []string, error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
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
	objs := []m{
		configMap(o, files),
		service(o),
		statefulSet(o, p.Info.PServers),
		trainerJob(o, p.Info),
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# psgraph job %q from %s: %d pservers, %d trainers (%s).\n", o.Name, dir, p.Info.PServers, p.Info.Trainers, p.Info.Mode)
	fmt.Fprintf(&b, "# Needs the Secret %q with key %q: kubectl create secret generic %s --from-literal=%s=$(head -c 32 /dev/urandom | base64)\n", o.TokenSecret, o.TokenKey, o.TokenSecret, o.TokenKey)
	for _, obj := range objs {
		b.WriteString("---\n")
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(obj); err != nil {
			return nil, nil, err
		}
		enc.Close()
	}
	return b.Bytes(), warnings, nil
}

// m is a YAML mapping that keeps its key order: key, value, key, value...
type m []any

func (x m) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(x); i += 2 {
		var k, v yaml.Node
		if err := k.Encode(x[i]); err != nil {
			return nil, err
		}
		if err := v.Encode(x[i+1]); err != nil {
			return nil, err
		}
		n.Content = append(n.Content, &k, &v)
	}
	return n, nil
}

func (o Options) meta(name, component string) m {
	md := m{"name", name}
	if o.Namespace != "" {
		md = append(md, "namespace", o.Namespace)
	}
	return append(md, "labels", o.labels(component))
}

func (o Options) labels(component string) m {
	l := m{"app.kubernetes.io/name", "psgraph", "app.kubernetes.io/instance", o.Name}
	if component != "" {
		l = append(l, "app.kubernetes.io/component", component)
	}
	return l
}

func configMap(o Options, files map[string]string) m {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	data := m{}
	for _, n := range names {
		data = append(data, n, files[n])
	}
	return m{"apiVersion", "v1", "kind", "ConfigMap", "metadata", o.meta(o.Name+"-plan", ""), "data", data}
}

func service(o Options) m {
	return m{"apiVersion", "v1", "kind", "Service", "metadata", o.meta(o.Name, "pserver"),
		"spec", m{
			"clusterIP", "None",
			// trainers must resolve a pserver before it is ready: it only
			// becomes ready by serving them
			"publishNotReadyAddresses", true,
			"selector", o.labels("pserver"),
			"ports", []m{{"name", "psgraph", "port", o.Port}},
		}}
}

func (o Options) env(role string, extra ...m) []m {
	e := []m{
		{"name", "PSGRAPH_ROLE", "value", role},
		{"name", "PSGRAPH_PLAN", "value", PlanMount},
		{"name", "PSGRAPH_TOKEN", "valueFrom", m{"secretKeyRef", m{"name", o.TokenSecret, "key", o.TokenKey}}},
	}
	return append(e, extra...)
}

// container runs psgraph under sh, which sets PSGRAPH_INDEX from indexVar:
// Kubernetes gives a pod its index only in the hostname (StatefulSet) or
// JOB_COMPLETION_INDEX (Indexed Job), not in a variable of our choosing.
func (o Options) container(role, indexExpr string, env []m, ports []m) m {
	c := m{"name", role, "image", o.Image,
		"command", []string{"sh", "-c", fmt.Sprintf(`PSGRAPH_INDEX="%s" exec psgraph run`, indexExpr)},
		"env", env,
	}
	if ports != nil {
		c = append(c, "ports", ports)
	}
	return append(c, "volumeMounts", []m{{"name", "plan", "mountPath", PlanMount, "readOnly", true}})
}

func (o Options) volumes() []m {
	return []m{{"name", "plan", "configMap", m{"name", o.Name + "-plan"}}}
}

func statefulSet(o Options, pservers int) m {
	env := o.env("pserver", m{"name", "PSGRAPH_LISTEN", "value", "0.0.0.0:" + strconv.Itoa(o.Port)})
	return m{"apiVersion", "apps/v1", "kind", "StatefulSet", "metadata", o.meta(o.Name+"-pserver", "pserver"),
		"spec", m{
			"serviceName", o.Name,
			"replicas", pservers,
			// every pserver must be up before any trainer can take a step
			"podManagementPolicy", "Parallel",
			"selector", m{"matchLabels", o.labels("pserver")},
			"template", m{
				"metadata", m{"labels", o.labels("pserver")},
				"spec", m{
					"containers", []m{o.container("pserver", "${HOSTNAME##*-}", env, []m{{"name", "psgraph", "containerPort", o.Port}})},
					"volumes", o.volumes(),
				},
			},
		}}
}

func trainerJob(o Options, in partition.PlanInfo) m {
	env := o.env("trainer", m{"name", "PSGRAPH_PSERVERS", "value", strings.Join(PServerEndpoints(o, in.PServers), ",")})
	return m{"apiVersion", "batch/v1", "kind", "Job", "metadata", o.meta(o.Name+"-trainer", "trainer"),
		"spec", m{
			"completionMode", "Indexed",
			"completions", in.Trainers,
			"parallelism", in.Trainers,
			// a restarted trainer cannot rejoin a synchronous step
			"backoffLimit", 0,
			"template", m{
				"metadata", m{"labels", o.labels("trainer")},
				"spec", m{
					"restartPolicy", "Never",
					"containers", []m{o.container("trainer", "$JOB_COMPLETION_INDEX", env, nil)},
					"volumes", o.volumes(),
				},
			},
		}}
}
