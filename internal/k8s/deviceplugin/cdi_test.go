package deviceplugin

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// What Allocate gives a container under each way of delivering GPUs: CDI
// devices where NVIDIA's CDI spec is (or --cdi on), else device nodes,
// with the driver's libraries where a folder of them is given.
func TestAllocateDeliversGPUsByCDIOrDeviceNodes(t *testing.T) {
	const nvidiaSpec = "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n- name: all\n"
	for _, tc := range []struct {
		name, mode, spec string
		driver           bool
		cdi, devs        []string
		mounts           []string // container paths beyond the shim, preload list and tenant
		preload          string
	}{
		{name: "auto, NVIDIA's spec by index", mode: CDIAuto, spec: nvidiaSpec, cdi: []string{"nvidia.com/gpu=0"},
			preload: ContainerShim + "\n"},
		{name: "auto, NVIDIA's spec by UUID", mode: CDIAuto, spec: "{\"kind\":\"nvidia.com/gpu\",\"devices\":[{\"name\":\"0\"},{\"name\":\"GPU-0\"}]}",
			cdi: []string{"nvidia.com/gpu=GPU-0"}, preload: ContainerShim + "\n"},
		{name: "on without a spec", mode: CDIOn, cdi: []string{"nvidia.com/gpu=GPU-0"}, preload: ContainerShim + "\n"},
		{name: "auto, another vendor's spec", mode: CDIAuto, spec: "kind: vendor.com/gpu\ndevices:\n- name: \"0\"\n",
			devs: []string{"/dev/nvidia0", "/dev/nvidiactl"}, preload: ContainerShim + "\n"},
		{name: "off despite the spec, driver given", mode: CDIOff, spec: nvidiaSpec, driver: true,
			devs:    []string{"/dev/nvidia0", "/dev/nvidiactl"},
			mounts:  []string{ContainerDriver + "/libcuda.so.1", ContainerDriver + "/libcuda.so.580.1", ContainerDriver + "/libnvidia-ml.so.1"},
			preload: ContainerShim + "\n" + ContainerDriver + "/libcuda.so.1\n" + ContainerDriver + "/libnvidia-ml.so.1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, k, _ := startPlugin(t, placedPod("a", 1000, time.Now()))
			k.set(listed("a"))
			dir := p.cfg.DevRoot
			for _, f := range []string{"nvidia0", "nvidiactl"} {
				os.WriteFile(filepath.Join(dir, f), nil, 0o644)
			}
			p.cfg.CDI = tc.mode
			if tc.spec != "" {
				os.MkdirAll(p.cfg.CDISpecDirs[0], 0o755)
				os.WriteFile(filepath.Join(p.cfg.CDISpecDirs[0], "nvidia.yaml"), []byte(tc.spec), 0o644)
			}
			var driverDir string
			if tc.driver {
				driverDir = filepath.Join(dir, "driver")
				os.Mkdir(driverDir, 0o755)
				for _, f := range []string{"libcuda.so.580.1", "libnvidia-ml.so.1", "libEGL.so.1"} {
					os.WriteFile(filepath.Join(driverDir, f), nil, 0o644)
				}
				os.Symlink("libcuda.so.580.1", filepath.Join(driverDir, "libcuda.so.1"))
				p.cfg.DriverLibs = driverDir
			}
			if err := p.cfg.Check(); err != nil {
				t.Fatal(err)
			}
			resp, err := allocate(t, p, "GPU-0-vgpu-0")
			if err != nil {
				t.Fatal(err)
			}
			c := resp.ContainerResponses[0]
			var cdi, devs, mounts []string
			for _, d := range c.CdiDevices {
				cdi = append(cdi, d.Name)
			}
			for _, d := range c.Devices {
				devs = append(devs, d.ContainerPath)
			}
			var preload string
			for _, m := range c.Mounts {
				switch m.ContainerPath {
				case ContainerShim, ContainerTenant:
				case ContainerPreload:
					b, _ := os.ReadFile(m.HostPath)
					preload = string(b)
				default:
					mounts = append(mounts, m.ContainerPath)
					if want := filepath.Join(driverDir, "libcuda.so.580.1"); strings.HasPrefix(filepath.Base(m.ContainerPath), "libcuda") && m.HostPath != want {
						t.Errorf("%s from %s, want %s", m.ContainerPath, m.HostPath, want)
					}
				}
			}
			slices.Sort(mounts)
			if !slices.Equal(cdi, tc.cdi) || !slices.Equal(devs, tc.devs) || !slices.Equal(mounts, tc.mounts) || preload != tc.preload {
				t.Errorf("CDI devices %v, device nodes %v, mounts %v, preload %q; want %v, %v, %v, %q", cdi, devs, mounts, preload, tc.cdi, tc.devs, tc.mounts, tc.preload)
			}
			if got, want := c.Envs["LD_LIBRARY_PATH"], map[bool]string{true: ContainerDriver}[tc.driver]; got != want {
				t.Errorf("LD_LIBRARY_PATH %q, want %q", got, want)
			}
		})
	}
}

func TestDeliveryConfigRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{CDI: "yes"}, `--cdi "yes": one of auto, on, off`},
		{Config{CDI: CDIOn, DriverLibs: dir}, "with --cdi on the runtime's CDI spec brings the driver"},
		{Config{CDI: CDIOff, DriverLibs: dir}, "--driver-libs " + dir + ": no libcuda.so.1 there"},
	} {
		if err := tc.cfg.checkDelivery(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
