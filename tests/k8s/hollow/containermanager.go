package hollow

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/server/healthz"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/resourceupdates"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"k8s.io/kubernetes/pkg/kubelet/status"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"
)

// containerManager is kubemark's stub container manager (no cgroups, no
// CPU or memory managers) with the device side of the kubelet's real one:
// its device manager, and a topology manager (policy none) as the pod
// admission handler that has the device manager allocate, as
// pkg/kubelet/cm's Linux container manager wires them.
type containerManager struct {
	cm.ContainerManager
	dm devicemanager.Manager
	tm topologymanager.Manager
}

func newContainerManager(logger klog.Logger) (*containerManager, error) {
	tm, err := topologymanager.NewManager(logger, nil, topologymanager.PolicyNone, topologymanager.ContainerTopologyScope, nil)
	if err != nil {
		return nil, err
	}
	dm, err := devicemanager.NewManagerImpl(logger, nil, tm)
	if err != nil {
		return nil, err
	}
	tm.AddHintProvider(logger, dm)
	return &containerManager{ContainerManager: cm.NewStubContainerManager(), dm: dm, tm: tm}, nil
}

func (c *containerManager) Start(ctx context.Context, node *v1.Node, activePods cm.ActivePodsFunc, getNode cm.GetNodeFunc, ready config.SourcesReady, podStatus status.PodStatusProvider, runtime internalapi.RuntimeService, lsci bool) error {
	if err := c.ContainerManager.Start(ctx, node, activePods, getNode, ready, podStatus, runtime, lsci); err != nil {
		return err
	}
	containers, running := containersOf(ctx, runtime)
	return c.dm.Start(klog.FromContext(ctx), devicemanager.ActivePodsFunc(activePods), ready, containers, running)
}

// containersOf is what the runtime runs, for the device manager to keep
// the devices of containers still running across a restart.
func containersOf(ctx context.Context, runtime internalapi.RuntimeService) (containermap.ContainerMap, sets.Set[string]) {
	uids := map[string]string{}
	sandboxes, _ := runtime.ListPodSandbox(ctx, nil)
	for _, s := range sandboxes {
		uids[s.Id] = s.Metadata.Uid
	}
	containers, running := containermap.NewContainerMap(), sets.New[string]()
	list, _ := runtime.ListContainers(ctx, nil)
	for _, ct := range list {
		uid, ok := uids[ct.PodSandboxId]
		if !ok {
			continue
		}
		containers.Add(uid, ct.Metadata.Name, ct.Id)
		if ct.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running.Insert(ct.Id)
		}
	}
	return containers, running
}

func (c *containerManager) GetPluginRegistrationHandlers() map[string]cache.PluginHandler {
	return map[string]cache.PluginHandler{pluginwatcherapi.DevicePlugin: c.dm.GetWatcherHandler()}
}

func (c *containerManager) GetHealthCheckers() []healthz.HealthChecker {
	return []healthz.HealthChecker{c.dm.GetHealthChecker()}
}

func (c *containerManager) GetDevicePluginResourceCapacity(logger klog.Logger) (v1.ResourceList, v1.ResourceList, []string) {
	return c.dm.GetCapacity(logger)
}

// GetResources is the device plugins' settings for the container (the
// plugin's PreStartContainer runs here where it asked for it).
func (c *containerManager) GetResources(ctx context.Context, pod *v1.Pod, container *v1.Container) (*kubecontainer.RunContainerOptions, error) {
	opts := &kubecontainer.RunContainerOptions{}
	dev, err := c.dm.GetDeviceRunContainerOptions(ctx, pod, container)
	if err != nil || dev == nil {
		return opts, err
	}
	opts.Devices = append(opts.Devices, dev.Devices...)
	opts.Mounts = append(opts.Mounts, dev.Mounts...)
	opts.Envs = append(opts.Envs, dev.Envs...)
	opts.Annotations = append(opts.Annotations, dev.Annotations...)
	opts.CDIDevices = append(opts.CDIDevices, dev.CDIDevices...)
	return opts, nil
}

func (c *containerManager) UpdatePluginResources(node *schedulerframework.NodeInfo, attrs *lifecycle.PodAdmitAttributes) error {
	return c.dm.UpdatePluginResources(node, attrs)
}

func (c *containerManager) GetAllocateResourcesPodAdmitHandler(klog.Logger) lifecycle.PodAdmitHandler {
	return c.tm
}

func (c *containerManager) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	return containerDevices(c.dm.GetDevices(podUID, containerName))
}

func (c *containerManager) GetAllocatableDevices(logger klog.Logger) []*podresourcesapi.ContainerDevices {
	return containerDevices(c.dm.GetAllocatableDevices(logger))
}

func (c *containerManager) ShouldResetExtendedResourceCapacity() bool {
	return c.dm.ShouldResetExtendedResourceCapacity()
}

func (c *containerManager) UpdateAllocatedDevices(logger klog.Logger) {
	c.dm.UpdateAllocatedDevices(logger)
}

func (c *containerManager) UpdateAllocatedResourcesStatus(logger klog.Logger, pod *v1.Pod, st *v1.PodStatus) {
	c.dm.UpdateAllocatedResourcesStatus(logger, pod, st)
}

func (c *containerManager) Updates() <-chan resourceupdates.Update {
	return c.dm.Updates()
}

// containerDevices is the pod-resources API's form of devices: one entry
// a device (the plugins here report no topology).
func containerDevices(devs devicemanager.ResourceDeviceInstances) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for resource, ids := range devs {
		for id := range ids {
			out = append(out, &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: []string{id}})
		}
	}
	return out
}
