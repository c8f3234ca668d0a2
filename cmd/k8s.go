package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/cmd/internal/k8s"
)

func newK8sCmd() *cobra.Command {
	o := k8s.Options{}
	c := &cobra.Command{
		Use:   "k8s SPLIT_DIR --image IMAGE [--namespace NS] [--name JOB]",
		Short: "Print Kubernetes manifests that run a split plan",
		Long: `K8s prints the manifests of a distributed job for 'kubectl apply -f -':
a ConfigMap holding the plan files, a headless Service JOB for the pservers,
and one Job per node: JOB-pserver-<i> (reachable as JOB-pserver-<i>.JOB,
checkpointing to its claim JOB-pserver-<i>-checkpoint, which a restarted
pserver resumes from) and JOB-trainer-<i> (trainer 0 saves the model to the
claim JOB-model; trainers that hold state of their own, such as
batch_norm's running statistics, checkpoint it to JOB-trainer-<i>-checkpoint). Every node is configured through PSGRAPH_* variables,
serves Prometheus metrics and its probes on --metrics-port, and has
resource requests derived from the plan unless --cpu and --memory say
otherwise. The token comes from an existing Secret (--token-secret, key
--token-key) that the manifests reference but do not create.
--serve-replicas N adds N serving replicas that follow the job and answer
inference requests (a Deployment and a Service NAME-serve, readiness on
/v2/health/ready). docs/deploy.md walks through applying, watching,
collecting the model and resuming after a failure.`,
		Example: `  psgraph split examples/digits-mlp.yaml --trainers 2 --pservers 2 -o plan/
  kubectl create secret generic digits-token --from-literal=token=$(head -c 32 /dev/urandom | base64)
  psgraph k8s plan/ --image registry.example.com/psgraph:v1 --name digits | kubectl apply -f -`,
		Args: exactArgs(1, "one split directory"),
		RunE: func(c *cobra.Command, args []string) error {
			if c.Flags().Changed("name") && !c.Flags().Changed("token-secret") {
				o.TokenSecret = o.Name + "-token"
			}
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			out, warnings, err := k8s.Manifests(args[0], o)
			if err != nil {
				return err
			}
			for _, w := range warnings {
				fmt.Fprintf(c.ErrOrStderr(), "psgraph: warning: %s\n", w)
			}
			_, err = c.OutOrStdout().Write(out)
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&o.Image, "image", "", "container image with psgraph on its PATH (required; see the Dockerfile)")
	f.StringVar(&o.Namespace, "namespace", "", "namespace of every object (default: kubectl's current one)")
	f.StringVar(&o.Name, "name", "psgraph", "job name: prefix of every object and of the pserver host names")
	f.IntVar(&o.Port, "port", 7000, "TCP port the pservers listen on")
	f.IntVar(&o.MetricsPort, "metrics-port", k8s.DefaultMetricsPort, "port of every node's /metrics, /healthz and /readyz (scrape annotations and probes point at it)")
	f.StringVar(&o.TokenSecret, "token-secret", "psgraph-token", "existing Secret holding the job's token (default: NAME-token)")
	f.StringVar(&o.TokenKey, "token-key", "token", "key of the token in the Secret")
	f.StringVar(&o.CPU, "cpu", k8s.DefaultCPU, "CPU request of every node (no CPU limit)")
	f.StringVar(&o.Memory, "memory", "", "memory request and limit of every node (default: per node from the plan's bytes, docs/deploy.md)")
	f.StringVar(&o.CheckpointSize, "checkpoint-size", "", "size of each pserver's checkpoint claim (default: 12x its bytes, at least 1Gi; a trainer holding state of its own gets 12x that state's bytes, at least 1Gi)")
	f.IntVar(&o.CheckpointEvery, "checkpoint-every", k8s.DefaultCheckpointEvery, "pservers checkpoint every K steps")
	f.StringVar(&o.ModelSize, "model-size", "", "size of the claim trainer 0 saves the model to (default: 2x the model, at least 1Gi)")
	f.StringVar(&o.StorageClass, "storage-class", "", "StorageClass of the claims (default: the cluster's default)")
	f.DurationVar(&o.ConnectTimeout, "connect-timeout", k8s.DefaultConnectTimeout, "trainers wait this long for pservers that are being scheduled or restarting")
	f.DurationVar(&o.TrainerTimeout, "trainer-timeout", k8s.DefaultTrainerTimeout, "pservers wait this long for a lost trainer to come back")
	f.IntVar(&o.BackoffLimit, "backoff-limit", k8s.DefaultBackoffLimit, "retries of each node's Job (trainers of a sync job with lookup tables get none)")
	f.IntVar(&o.ServeReplicas, "serve-replicas", 0, "serving replicas that follow the job (psgraph serve --plan): a Deployment NAME-serve and a Service NAME-serve, ready once caught up (docs/serving.md)")
	f.IntVar(&o.ServePort, "serve-port", k8s.DefaultServePort, "port of the serving replicas' inference requests and /metrics")
	return c
}
