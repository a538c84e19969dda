package deviceplugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

// How a container gets its GPUs and the driver (Config.CDI).
const (
	// CDIAuto: as CDI devices where NVIDIA's CDI spec (kind CDIKind) is in
	// one of the spec folders, else as device nodes.
	CDIAuto = "auto"
	// CDIOn: as CDI devices; the container runtime's spec brings their
	// device nodes, the driver's libraries and its hooks.
	CDIOn = "on"
	// CDIOff: as device nodes, with the driver's libraries from
	// Config.DriverLibs where it is given (else the runtime brings them, as
	// NVIDIA's does by NVIDIA_VISIBLE_DEVICES).
	CDIOff = "off"

	// CDIKind is the kind of NVIDIA's GPUs in a CDI spec (nvidia-ctk cdi
	// generate): a device is named CDIKind=NAME.
	CDIKind = "nvidia.com/gpu"
	// ContainerDriver is where a container finds the driver's libraries
	// given from Config.DriverLibs.
	ContainerDriver = "/usr/local/flexgv/driver"
)

// CDISpecDirs are the folders container runtimes read CDI specs from.
var CDISpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// driverLibs are the driver's user-space libraries a CUDA program needs,
// as name patterns: libcuda opens the others by name.
var driverLibs = []string{"libcuda.so*", "libnvidia-ml.so*", "libnvidia-ptxjitcompiler.so*", "libnvidia-nvvm.so*",
	"libnvidia-gpucomp.so*", "libcudadebugger.so*"}

// checkDelivery refuses a CDI mode or driver folder the plugin cannot use.
func (c Config) checkDelivery() error {
	if !slices.Contains([]string{CDIAuto, CDIOn, CDIOff}, c.CDI) {
		return fmt.Errorf("--cdi %q: one of auto, on, off", c.CDI)
	}
	if c.DriverLibs == "" {
		return nil
	}
	if c.CDI == CDIOn {
		return errors.New("--driver-libs is for containers given device nodes; with --cdi on the runtime's CDI spec brings the driver")
	}
	if _, err := os.Stat(filepath.Join(c.DriverLibs, "libcuda.so.1")); err != nil {
		return fmt.Errorf("--driver-libs %s: no libcuda.so.1 there: %w", c.DriverLibs, err)
	}
	return nil
}

// cdiSpec is what the plugin reads of a CDI spec.
type cdiSpec struct {
	Kind    string `json:"kind"`
	Devices []struct {
		Name string `json:"name"`
	} `json:"devices"`
}

// cdiDevices reads the NVIDIA CDI specs of the spec folders: the names of
// their devices; found is false where there is none. Files that are not
// specs are passed over, said in errs.
func cdiDevices(dirs []string) (names map[string]bool, found bool, errs []error) {
	names = map[string]bool{}
	for _, dir := range dirs {
		for _, pat := range []string{"*.yaml", "*.json"} {
			files, _ := filepath.Glob(filepath.Join(dir, pat))
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				var s cdiSpec
				if err := yaml.Unmarshal(b, &s); err != nil {
					errs = append(errs, fmt.Errorf("CDI spec %s: %w", f, err))
					continue
				}
				if s.Kind != CDIKind {
					continue
				}
				found = true
				for _, d := range s.Devices {
					names[d.Name] = true
				}
			}
		}
	}
	return names, found, errs
}

// deliver gives the container the GPUs gpus: as CDI devices, or as device
// nodes with the driver's libraries (then named in the loader's preload
// list after the shim, returned: a program linked with libcuda.so.1, or
// opening it by that name, gets it whatever LD_LIBRARY_PATH says).
func (p *Plugin) deliver(resp *pluginapi.ContainerAllocateResponse, gpus []vgpu.GPU) (preload []string, err error) {
	useCDI := p.cfg.CDI == CDIOn
	var names map[string]bool
	if p.cfg.CDI != CDIOff {
		var found bool
		var errs []error
		names, found, errs = cdiDevices(p.cfg.CDISpecDirs)
		for _, e := range errs {
			p.log.Print(e)
		}
		useCDI = useCDI || found
	}
	if useCDI {
		for _, g := range gpus {
			// nvidia-ctk names devices by index by default, by UUID with
			// --device-name-strategy=uuid; without a spec to go by (--cdi
			// on), by UUID, which a lost GPU does not renumber.
			name := g.UUID
			if idx := strconv.Itoa(g.Index); !names[g.UUID] && names[idx] {
				name = idx
			}
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: CDIKind + "=" + name})
		}
		return nil, nil
	}
	for _, g := range gpus {
		resp.Devices = append(resp.Devices, p.deviceNode(fmt.Sprintf("nvidia%d", g.Minor))...)
	}
	for _, ctl := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
		resp.Devices = append(resp.Devices, p.deviceNode(ctl)...)
	}
	if p.cfg.DriverLibs == "" {
		return nil, nil
	}
	for _, pat := range driverLibs {
		files, _ := filepath.Glob(filepath.Join(p.cfg.DriverLibs, pat))
		for _, f := range files {
			// A link's target, under the link's name: libcuda.so.1 is one.
			host, err := filepath.EvalSymlinks(f)
			if err != nil {
				return nil, fmt.Errorf("driver library %s: %w", f, err)
			}
			resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: filepath.Join(ContainerDriver, filepath.Base(f)), HostPath: host, ReadOnly: true})
		}
	}
	resp.Envs["LD_LIBRARY_PATH"] = ContainerDriver // for the libraries libcuda opens by name
	return driverPreload(p.cfg.DriverLibs), nil
}

// driverPreload are the container paths of the libraries of dir that
// programs open by name: libcuda.so.1, and libnvidia-ml.so.1 where it is.
func driverPreload(dir string) []string {
	libs := []string{filepath.Join(ContainerDriver, "libcuda.so.1")}
	if _, err := os.Stat(filepath.Join(dir, "libnvidia-ml.so.1")); err == nil {
		libs = append(libs, filepath.Join(ContainerDriver, "libnvidia-ml.so.1"))
	}
	return libs
}
