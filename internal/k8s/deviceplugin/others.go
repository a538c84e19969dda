package deviceplugin

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Beside NVIDIA's device plugin. Config.GPUs names the GPUs this plugin
// takes (the others are left to NVIDIA's plugin, told of them by its
// NVIDIA_VISIBLE_DEVICES); and whatever the lists say, a GPU another
// nvidia.com/ resource advertises on the node is not advertised here: two
// plugins handing out one GPU would put pods on it that neither limits.

// chosen keeps the devices Config.GPUs names (by UUID or index); all
// where it names none. A name no GPU has is said once: a typo would
// otherwise leave the node without vGPUs, silently.
func (p *Plugin) chosen(devs []Device) []Device {
	if len(p.cfg.GPUs) == 0 {
		return devs
	}
	for _, name := range p.cfg.GPUs {
		if !slices.ContainsFunc(devs, func(d Device) bool { return d.UUID == name || strconv.Itoa(d.Index) == name }) && !p.unknown[name] {
			p.log.Printf("--gpus names %s, which is no GPU of this node (NVML lists %d)", name, len(devs))
			p.unknown[name] = true
		}
	}
	return slices.DeleteFunc(slices.Clone(devs), func(d Device) bool {
		return !slices.Contains(p.cfg.GPUs, d.UUID) && !slices.Contains(p.cfg.GPUs, strconv.Itoa(d.Index))
	})
}

// advertisedByOthers names, from the kubelet's pod-resources API, the
// devices (IDs: a GPU's UUID or index, as NVIDIA's plugin names them) that
// resources of NVIDIA's other than this plugin's advertise on the node, by
// resource. ok is false where the kubelet cannot say (no pod-resources
// socket, or a kubelet without GetAllocatableResources).
func (p *Plugin) advertisedByOthers(ctx context.Context) (ids map[string]string, ok bool) {
	if p.cfg.PodResources == "" {
		return nil, false
	}
	conn, err := grpc.NewClient("unix://"+p.cfg.PodResources, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, false
	}
	defer conn.Close()
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).GetAllocatableResources(actx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		return nil, false
	}
	ids = map[string]string{}
	for _, d := range resp.Devices {
		if !strings.HasPrefix(d.ResourceName, "nvidia.com/") {
			continue
		}
		for _, id := range d.DeviceIds {
			ids[id] = d.ResourceName
		}
	}
	return ids, true
}
