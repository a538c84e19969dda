package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// token is the test administrator's bearer token (group system:masters).
const token = "flexgv-test-admin"

// ControlPlane is a running etcd and kube-apiserver, and the kube-scheduler
// once StartScheduler has started one.
type ControlPlane struct {
	Dir        string // logs, configuration and etcd's data
	URL        string // the API server, https://127.0.0.1:PORT
	Kubeconfig string // a kubeconfig of the administrator
	Config     *rest.Config
	Client     *kubernetes.Clientset
	Started    time.Duration // from starting etcd to the API server ready
	bins       Binaries
	procs      []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// Start starts etcd and the API server in dir and waits until the API
// server is ready. Stop ends them.
func Start(bins Binaries, dir string) (cp *ControlPlane, err error) {
	cp = &ControlPlane{Dir: dir, bins: bins}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	start := time.Now()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	if _, err := cp.spawn("etcd", bins.Etcd,
		"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL,
		"--log-level", "warn",
		// Tests write little; a small backend and no fsync wait keep it quick.
		"--quota-backend-bytes", "1073741824", "--unsafe-no-fsync"); err != nil {
		return nil, err
	}
	key, err := writeServiceAccountKey(filepath.Join(dir, "sa.key"))
	if err != nil {
		return nil, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+",admin,1,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	cp.URL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	if _, err := cp.spawn("kube-apiserver", bins.APIServer,
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(ports[2]),
		"--cert-dir", filepath.Join(dir, "apiserver-certs"),
		"--token-auth-file", tokens,
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", key, "--service-account-signing-key-file", key,
		"--service-cluster-ip-range", "10.96.0.0/24",
		// No controller manager creates service accounts or endpoints here.
		"--disable-admission-plugins", "ServiceAccount",
		"--endpoint-reconciler-type", "none",
		// Webhooks of a Service are called at its EndpointSlice's address
		// (no proxy routes ClusterIPs here), still verified for its name.
		"--enable-aggregator-routing=true",
		"--enable-priority-and-fairness=false",
		"--v", "1"); err != nil {
		return nil, err
	}
	cp.Config = &rest.Config{
		Host: cp.URL, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             1000, Burst: 1000,
	}
	cp.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(cp.Kubeconfig, []byte(kubeconfig(cp.URL)), 0o600); err != nil {
		return nil, err
	}
	if err := cp.waitReady("kube-apiserver", cp.URL+"/readyz", 90*time.Second); err != nil {
		return nil, err
	}
	cp.Started = time.Since(start)
	if cp.Client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return nil, err
	}
	return cp, nil
}

// schedulerConfig is kube-scheduler's configuration file, with its
// kubeconfig and the caller's extra top-level settings to fill in.
const schedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 200
  burst: 400
leaderElection:
  leaderElect: false
%s`

// StartScheduler starts kube-scheduler with extra configuration (extenders:
// ..., as YAML at the top level of a KubeSchedulerConfiguration) and waits
// until it is healthy.
func (cp *ControlPlane) StartScheduler(extra string) (time.Duration, error) {
	start := time.Now()
	_, err := cp.StartSchedulerConfig("kube-scheduler", fmt.Sprintf(schedulerConfig, cp.Kubeconfig, extra))
	return time.Since(start), err
}

// StartSchedulerConfig starts a kube-scheduler, its log named name, with
// the whole configuration config, and waits until it is healthy; stop ends
// it.
func (cp *ControlPlane) StartSchedulerConfig(name, config string) (stop func(), err error) {
	cfg := filepath.Join(cp.Dir, name+".yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	p, err := cp.spawn(name, cp.bins.Scheduler,
		"--config", cfg,
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(ports[0]),
		"--authentication-skip-lookup", "--authorization-always-allow-paths", "/healthz,/readyz,/livez",
		"--v", "2")
	if err != nil {
		return nil, err
	}
	stop = func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
	}
	if err := cp.waitReady(name, fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[0]), 60*time.Second); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// Log returns the log of the named component so far.
func (cp *ControlPlane) Log(name string) string {
	for _, p := range cp.procs {
		if p.name == name {
			b, _ := os.ReadFile(p.log)
			return string(b)
		}
	}
	return ""
}

// Stop ends every component, the last started first.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	cp.procs = nil
}

func (cp *ControlPlane) spawn(name, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(cp.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Killed with the test if the test dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	cp.procs = append(cp.procs, p)
	return p, nil
}

// waitReady polls url until it answers 200, the component exits, or the
// time is up; failing, it says why with the end of the component's log.
func (cp *ControlPlane) waitReady(name, url string, limit time.Duration) error {
	var p *proc
	for _, q := range cp.procs {
		if q.name == name {
			p = q
		}
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	last := "no answer"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %s\n%s", name, p.cmd.ProcessState, tail(cp.Log(name), 3000))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (%s)\n%s", name, limit, last, tail(cp.Log(name), 3000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func writeServiceAccountKey(path string) (string, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	return path, os.WriteFile(path, b, 0o600)
}

func kubeconfig(server string) string {
	return strings.Join([]string{
		"apiVersion: v1", "kind: Config",
		"clusters:", "- name: test", "  cluster:", "    server: " + server, "    insecure-skip-tls-verify: true",
		"users:", "- name: admin", "  user:", "    token: " + token,
		"contexts:", "- name: test", "  context:", "    cluster: test", "    user: admin",
		"current-context: test", "",
	}, "\n")
}
