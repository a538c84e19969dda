package k8s

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flexgv/flexgv/internal/k8s/deviceplugin"
	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

// gpuServer is node name made a GPU server: its daemon serves remote
// vGPUs through a flexgv serve on a unix socket at addr, admitting them by
// the token files of tokens, and moves them off when the node is cordoned. With slots, a kubelet runs remote vGPUs of its own
// there too; without, the node is its daemon alone (the device manager's
// folder is one per test process: one kubelet at a time).
func gpuServer(t *testing.T, name string, slots int) (n *gpuNode, addr, tokens string) {
	t.Helper()
	dir := t.TempDir()
	tokens = filepath.Join(dir, "tokens")
	sock := filepath.Join(dir, "gpu.sock")
	os.Mkdir(tokens, 0o700)
	flags := []string{"--remote-addr", "unix://" + sock, "--tenant-dir", tokens, "--secret-namespace", chartNamespace, "--serve-admin", sock + ".admin"}
	if slots > 0 {
		n = startGPUNode(t, name, append(flags, "--remote-slots", fmt.Sprint(slots))...)
	} else {
		plugins := filepath.Join(dir, "plugins")
		os.Mkdir(plugins, 0o755)
		n = newGPUNode(t, name, append(flags, "--plugin-dir", plugins, "--pod-resources", ""))
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": name}}}
		if _, err := cp.Client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cp.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		devRoot := filepath.Join(n.dir, "dev")
		os.MkdirAll(devRoot, 0o755)
		for _, f := range []string{"nvidia0", "nvidia1", "nvidiactl"} {
			os.WriteFile(filepath.Join(devRoot, f), nil, 0o644)
		}
		n.startDaemon()
		eventually(t, 20*time.Second, "node "+name+" published as a GPU server", func() (bool, error) {
			node, err := cp.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			inv, ok, err := vgpu.NodeInventory(node)
			return ok && inv.Remote != "", err
		})
	}
	n.gpuForAll() // the server runs its executors as nobody
	serve := exec.Command(filepath.Join(build, "bin", "flexgv"), "serve", "--listen", "unix://"+sock, "--tenant-dir", tokens)
	serve.Env = append(os.Environ(), n.env...)
	var log bytes.Buffer
	serve.Stdout, serve.Stderr = &log, &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		serve.Process.Kill()
		serve.Wait()
		if t.Failed() {
			t.Logf("flexgv serve of %s:\n%s", name, log.String())
		}
	})
	return n, "unix://" + sock, tokens
}

func setUnschedulable(t *testing.T, name string, on bool) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("node %s unschedulable %v", name, on), func() (bool, error) {
		n, err := cp.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		n.Spec.Unschedulable = on
		_, err = cp.Client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err == nil, err
	})
}

// A GPU server drained (cordoned) keeps no remote vGPU: a pod's program
// that runs on one, mid-run, moves to another server with its device
// memory, kernel, graph and event, and finishes there with the output of
// a run that never moved; the drained server lets go of its tenant, token
// and Secret, the new one holds them.
func TestRemoteVGPUMovesOffADrainedServer(t *testing.T) {
	chartNS(t) // the Secrets' namespace, as the chart's
	a, _, _ := gpuServer(t, "gpu-da", 2)
	b, bAddr, _ := gpuServer(t, "gpu-db", 0)
	setUnschedulable(t, b.name, true) // the pod's vGPU goes to a first
	ns := namespace(t, "drain")
	ctx := context.Background()
	hold := t.TempDir()
	ready, goOn := filepath.Join(hold, "ready"), filepath.Join(hold, "go")
	p := clientPod(ns, "mover", a.name, 0, 0, "mover", "6", "4", ready, goOn, "busy")
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{vgpu.ResourceRemoteVGPU: resource.MustParse("1")}
	p.Annotations = map[string]string{vgpu.AnnotationRemoteMemory: "1024"}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the mover held mid-run", func() (bool, error) {
		_, err := os.Stat(ready)
		return err == nil, err
	})
	pod, err := cp.Client.CoreV1().Pods(ns).Get(ctx, "mover", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if server, _, _ := vgpu.PodRemoteGPU(pod); server != a.name {
		t.Fatalf("placed on %q, want %s", server, a.name)
	}
	tenant := deviceplugin.TenantPrefix + string(pod.UID)

	setUnschedulable(t, b.name, false)
	setUnschedulable(t, a.name, true)
	moved := podCondition(t, ns, "mover", vgpu.ConditionMoved, corev1.ConditionTrue, "Migrated")
	if server, uuid, _ := vgpu.PodRemoteGPU(moved); server != b.name || !strings.HasPrefix(uuid, "GPU-") {
		t.Errorf("moved to %q/%q, want %s", server, uuid, b.name)
	}
	eventually(t, 20*time.Second, "the tenant and token on "+b.name+" alone", func() (bool, error) {
		s, err := cp.Client.CoreV1().Secrets(chartNamespace).Get(ctx, deviceplugin.RemoteSecretPrefix+string(pod.UID), metav1.GetOptions{})
		label := ""
		if err == nil {
			label = s.Labels[deviceplugin.LabelRemoteServer]
		}
		return !slices.Contains(a.tenants(), tenant) && slices.Contains(b.tenants(), tenant) && label == b.name,
			fmt.Errorf("tenants of %s %v, of %s %v; Secret made by %q (%v)", a.name, a.tenants(), b.name, b.tenants(), label, err)
	})
	// A program the pod starts from now on dials the new server (the old
	// one no longer admits the pod's token), as one started by kubectl exec.
	var atFile string
	for _, e := range a.kubelet.Allocation("mover").Envs {
		if e.Name == "FLEXGV_REMOTE_ADDRESS_FILE" {
			atFile = e.Value
		}
	}
	for _, m := range a.kubelet.Allocation("mover").Mounts {
		if rest, ok := strings.CutPrefix(atFile, m.ContainerPath+"/"); ok {
			atFile = filepath.Join(m.HostPath, rest)
		}
	}
	eventually(t, 20*time.Second, "the pod's address file naming "+bAddr, func() (bool, error) {
		b, err := os.ReadFile(atFile)
		return strings.TrimSpace(string(b)) == bAddr, fmt.Errorf("%q: %q, %v", atFile, b, err)
	})
	later, err := a.execInPod("mover", "mover", "2")
	run2 := exec.Command(filepath.Join(build, "tests", "mover"), "2")
	run2.Env = append(os.Environ(), a.env...)
	local2, lerr := run2.Output()
	if err != nil || lerr != nil || moverSteps(later) != string(local2) {
		t.Errorf("a program started in the pod after the move: %v\n%s\nwant the steps of\n%s", err, later, local2)
	}
	os.WriteFile(goOn, nil, 0o644)
	done := finished(t, ns, "mover")
	out, _ := a.kubelet.Output("mover")
	run := exec.Command(filepath.Join(build, "tests", "mover"), "6")
	run.Env = append(os.Environ(), a.env...)
	local, err := run.Output()
	if err != nil {
		t.Fatal(err)
	}
	if done.Status.Phase != corev1.PodSucceeded || moverSteps(out) != string(local) || !strings.Contains(out, "moved to the GPU server "+bAddr) {
		t.Errorf("the moved program: %s\n%s\nwant the steps of\n%s", done.Status.Phase, out, local)
	}
}

// moverSteps is the lines of the mover's output that say what it computed.
func moverSteps(out string) string {
	var steps []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "step ") || l == "done" {
			steps = append(steps, l)
		}
	}
	return strings.Join(steps, "\n") + "\n"
}
