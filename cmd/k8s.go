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
a ConfigMap holding the plan files, a headless Service and a StatefulSet of
the pservers (reachable as JOB-pserver-<i>.JOB), and an Indexed Job of the
trainers. Every node is configured through PSGRAPH_* variables; the token
comes from an existing Secret (--token-secret, key --token-key) that the
manifests reference but do not create. docs/deploy.md walks through it.`,
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
	f.StringVar(&o.TokenSecret, "token-secret", "psgraph-token", "existing Secret holding the job's token (default: NAME-token)")
	f.StringVar(&o.TokenKey, "token-key", "token", "key of the token in the Secret")
	return c
}
