// Package kubeclient connects FlexGV's cluster components to the API
// server: through a kubeconfig file when one is given, else as the pod
// they run in.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// New returns a client of the cluster kubeconfig names, or of the cluster
// this process runs in as a pod when kubeconfig is empty.
func New(kubeconfig string) (*kubernetes.Clientset, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("not running in a pod (%v); give --kubeconfig", err)
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	// Scheduling bursts: the default 5 requests/s would throttle binding.
	cfg.QPS, cfg.Burst = 200, 400
	return kubernetes.NewForConfig(cfg)
}
