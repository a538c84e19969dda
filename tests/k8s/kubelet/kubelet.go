// Package kubelet is the part of a kubelet that device plugins meet, for
// tests: the kubelet's own device manager (k8s.io/kubernetes
// pkg/kubelet/cm/devicemanager) serving the registration socket, with
// around it what the kubelet does with it — node capacity from the
// plugins' devices, pods bound to the node admitted one at a time as their
// bindings arrive, devices allocated per container, and the container
// started with the runtime settings the plugins returned (by a Runtime the
// test gives).
//
// The device manager's socket folder is fixed
// (/var/lib/kubelet/device-plugins), as in a kubelet: run it in a mount
// namespace of its own.
package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// Runtime runs a container with the device plugins' settings until it
// exits or ctx ends (the pod was deleted), and returns its exit status and
// output.
type Runtime func(ctx context.Context, pod *corev1.Pod, c *corev1.Container, opts *devicemanager.DeviceRunContainerOptions) (int, string)

// Node is one kubelet's device side.
type Node struct {
	Name    string
	client  kubernetes.Interface
	dm      devicemanager.Manager
	runtime Runtime
	cancel  context.CancelFunc
	done    chan struct{}
	// podResources serves the pod-resources API.
	podResources *grpc.Server

	// gate is held while admission is paused (Pause).
	gate sync.Mutex

	mu       sync.Mutex
	admitted map[types.UID]*corev1.Pod // not yet finished
	stop     map[types.UID]context.CancelFunc
	seen     map[types.UID]bool
	// Allocations are the settings each container was started with, by
	// pod name; Outputs what it printed.
	Allocations map[string]*devicemanager.DeviceRunContainerOptions
	Outputs     map[string]string
}

// Start starts the device manager, as a kubelet starting up does (it
// removes the plugin sockets it finds), the pod-resources API on the
// socket podResources, and the node's pod loop.
func Start(client kubernetes.Interface, name, podResources string, runtime Runtime) (*Node, error) {
	logger := klog.Background()
	dm, err := devicemanager.NewManagerImpl(logger, nil, topologymanager.NewFakeManager(logger))
	if err != nil {
		return nil, err
	}
	n := &Node{
		Name: name, client: client, dm: dm, runtime: runtime, done: make(chan struct{}),
		admitted: map[types.UID]*corev1.Pod{}, stop: map[types.UID]context.CancelFunc{}, seen: map[types.UID]bool{},
		Allocations: map[string]*devicemanager.DeviceRunContainerOptions{}, Outputs: map[string]string{},
	}
	active := func() []*corev1.Pod {
		n.mu.Lock()
		defer n.mu.Unlock()
		var out []*corev1.Pod
		for _, p := range n.admitted {
			out = append(out, p)
		}
		return out
	}
	ready := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	if err := dm.Start(logger, active, ready, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return nil, err
	}
	os.Remove(podResources)
	lis, err := net.Listen("unix", podResources)
	if err != nil {
		dm.Stop(logger)
		return nil, err
	}
	n.podResources = grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(n.podResources, podResourcesServer{n: n})
	go n.podResources.Serve(lis)
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go n.loop(ctx)
	return n, nil
}

// podResourcesServer is the kubelet's pod-resources List: the devices the
// device manager allocated to each container of the pods it admitted.
type podResourcesServer struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	n *Node
}

func (s podResourcesServer) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, pod := range s.n.admitted {
		pr := &podresourcesv1.PodResources{Name: pod.Name, Namespace: pod.Namespace}
		for _, c := range pod.Spec.Containers {
			cr := &podresourcesv1.ContainerResources{Name: c.Name}
			for resource, devs := range s.n.dm.GetDevices(string(pod.UID), c.Name) {
				ids := make([]string, 0, len(devs))
				for id := range devs {
					ids = append(ids, id)
				}
				cr.Devices = append(cr.Devices, &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: ids})
			}
			pr.Containers = append(pr.Containers, cr)
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	return resp, nil
}

// GetAllocatableResources is the kubelet's: the healthy devices of every
// plugin, by resource.
func (s podResourcesServer) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	resp := &podresourcesv1.AllocatableResourcesResponse{}
	for resource, devs := range s.n.dm.GetAllocatableDevices(klog.Background()) {
		ids := make([]string, 0, len(devs))
		for id := range devs {
			ids = append(ids, id)
		}
		resp.Devices = append(resp.Devices, &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: ids})
	}
	return resp, nil
}

// Stop stops the pod loop and the device manager, as a kubelet going down
// (its containers go on).
func (n *Node) Stop() {
	n.cancel()
	<-n.done
	n.podResources.Stop()
	n.dm.Stop(klog.Background())
}

// StopContainers stops every container still running.
func (n *Node) StopContainers() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, stop := range n.stop {
		stop()
	}
}

// Allocatable is how many healthy devices of resource the device manager
// has from its plugins.
func (n *Node) Allocatable(resource corev1.ResourceName) int64 {
	_, allocatable, _ := n.dm.GetCapacity(klog.Background())
	q := allocatable[resource]
	return q.Value()
}

// Output is what the container of pod name printed, once it has exited.
func (n *Node) Output(name string) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out, ok := n.Outputs[name]
	return out, ok
}

// Allocation is the runtime settings pod name's container got.
func (n *Node) Allocation(name string) *devicemanager.DeviceRunContainerOptions {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.Allocations[name]
}

func (n *Node) loop(ctx context.Context) {
	defer close(n.done)
	go func() {
		for ctx.Err() == nil {
			n.syncStatus(ctx)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	for ctx.Err() == nil {
		n.watchPods(ctx)
	}
}

// syncStatus puts the plugins' device counts in the node's status, as the
// kubelet's node status loop does.
func (n *Node) syncStatus(ctx context.Context) {
	capacity, allocatable, _ := n.dm.GetCapacity(klog.Background())
	if len(capacity) == 0 {
		return
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"capacity": capacity, "allocatable": allocatable}})
	n.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
}

// watchPods admits the node's pods as the kubelet's pod source delivers
// them: those there at the start oldest first (HandlePodAdditions sorts a
// batch by creation), then each as its binding arrives.
func (n *Node) watchPods(ctx context.Context) {
	sel := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String()}
	list, err := n.client.CoreV1().Pods("").List(ctx, sel)
	if err != nil {
		time.Sleep(100 * time.Millisecond)
		return
	}
	pods := list.Items
	slices.SortStableFunc(pods, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	for i := range pods {
		n.consider(ctx, &pods[i])
	}
	// Pods deleted meanwhile have their containers stopped.
	n.mu.Lock()
	for uid := range n.admitted {
		if !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.UID == uid }) {
			n.forget(uid)
		}
	}
	n.mu.Unlock()
	sel.ResourceVersion = list.ResourceVersion
	w, err := n.client.CoreV1().Pods("").Watch(ctx, sel)
	if err != nil {
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return
		}
		switch ev.Type {
		case watch.Added, watch.Modified:
			if pod.DeletionTimestamp != nil {
				// Deleted with a grace period (an eviction): the kubelet
				// stops the containers, then removes the pod.
				n.mu.Lock()
				n.forget(pod.UID)
				n.mu.Unlock()
				zero, uid := int64(0), pod.UID
				n.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name,
					metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
				continue
			}
			n.consider(ctx, pod)
		case watch.Deleted:
			n.mu.Lock()
			n.forget(pod.UID)
			n.mu.Unlock()
		}
	}
}

// forget stops a deleted pod's container and releases its devices; the
// caller holds n.mu.
func (n *Node) forget(uid types.UID) {
	delete(n.admitted, uid)
	if stop := n.stop[uid]; stop != nil {
		stop()
	}
}

// Pause holds admission, as a busy kubelet would, until the returned
// function is called; pods bound meanwhile are then admitted in the order
// their bindings arrived.
func (n *Node) Pause() (resume func()) {
	n.gate.Lock()
	return n.gate.Unlock
}

// consider admits pod if it is new to the node and pending.
func (n *Node) consider(ctx context.Context, pod *corev1.Pod) {
	n.gate.Lock()
	defer n.gate.Unlock()
	n.mu.Lock()
	seen := n.seen[pod.UID]
	n.seen[pod.UID] = true
	n.mu.Unlock()
	if !seen && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodPending {
		n.admit(ctx, pod)
	}
}

func (n *Node) admit(ctx context.Context, pod *corev1.Pod) {
	n.mu.Lock()
	n.admitted[pod.UID] = pod
	n.mu.Unlock()
	c := &pod.Spec.Containers[0]
	for i := range pod.Spec.Containers {
		if err := n.dm.Allocate(ctx, pod, &pod.Spec.Containers[i], lifecycle.AddOperation); err != nil {
			// The kubelet's message for a failed admission by the device manager.
			n.finish(ctx, pod, corev1.PodFailed, "UnexpectedAdmissionError", fmt.Sprintf("Allocate failed due to %v, which is unexpected", err), -1)
			return
		}
	}
	opts, err := n.dm.GetDeviceRunContainerOptions(ctx, pod, c)
	if err != nil {
		n.finish(ctx, pod, corev1.PodFailed, "RunContainerError", err.Error(), -1)
		return
	}
	cctx, stop := context.WithCancel(context.Background())
	n.mu.Lock()
	n.Allocations[pod.Name] = opts
	n.stop[pod.UID] = stop
	n.mu.Unlock()
	n.setStatus(ctx, pod, corev1.PodStatus{Phase: corev1.PodRunning, StartTime: ptrNow()})
	go func() {
		defer stop()
		code, out := n.runtime(cctx, pod, c, opts)
		n.mu.Lock()
		n.Outputs[pod.Name] = out
		n.mu.Unlock()
		phase := corev1.PodSucceeded
		if code != 0 {
			phase = corev1.PodFailed
		}
		n.finish(context.Background(), pod, phase, "", "", code)
	}()
}

func ptrNow() *metav1.Time {
	t := metav1.Now()
	return &t
}

func (n *Node) finish(ctx context.Context, pod *corev1.Pod, phase corev1.PodPhase, reason, msg string, code int) {
	st := corev1.PodStatus{Phase: phase, Reason: reason, Message: msg}
	if code >= 0 {
		st.ContainerStatuses = []corev1.ContainerStatus{{
			Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code)}},
		}}
	}
	n.setStatus(ctx, pod, st)
	n.mu.Lock()
	delete(n.admitted, pod.UID)
	delete(n.stop, pod.UID)
	n.mu.Unlock()
}

func (n *Node) setStatus(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus) {
	for range 10 {
		cur, err := n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || cur.UID != pod.UID {
			return
		}
		cur.Status = st
		if _, err = n.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
