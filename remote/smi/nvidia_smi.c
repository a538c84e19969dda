/* nvidia-smi for remote GPUs: NVIDIA's nvidia-smi refuses the remoting
 * client's NVML (it looks for a private table first), so programs that
 * shell out to it, and people at a shell, would find no GPU. This one
 * answers the forms scripts use (the summary, -L, --query-gpu and
 * --query-compute-apps as CSV, -i, -l/-lms) through whatever
 * libnvidia-ml.so.1 the loader finds: the client's remotely, a driver's
 * natively (which is how it is checked against NVIDIA's). What that NVML
 * does not answer prints as [N/A]; other options are refused with a
 * message, never answered with something else. */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEVS 64
#define MAX_FIELDS 64
#define NA "[N/A]"

enum { EXIT_ARGS = 2, EXIT_NO_DEVICE = 6, EXIT_NO_NVML = 9 };

/* NVML's entry points, looked up one by one: a library without one (the
 * simulated GPU's has no serial numbers) leaves that field [N/A]. */
static struct {
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*driver_version)(char *, unsigned);
    nvmlReturn_t (*cuda_version)(int *);
    nvmlReturn_t (*count)(unsigned *);
    nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*serial)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t *);
    nvmlReturn_t (*persistence)(nvmlDevice_t, nvmlEnableState_t *);
    nvmlReturn_t (*compute_mode)(nvmlDevice_t, nvmlComputeMode_t *);
    nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned *, unsigned *);
    nvmlReturn_t (*cc)(nvmlDevice_t, int *, int *);
    nvmlReturn_t (*pstate)(nvmlDevice_t, nvmlPstates_t *);
    nvmlReturn_t (*fan)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*temperature)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned *);
    nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*memory_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*enforced_limit)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*clock)(nvmlDevice_t, nvmlClockType_t, unsigned *);
    nvmlReturn_t (*max_clock)(nvmlDevice_t, nvmlClockType_t, unsigned *);
    nvmlReturn_t (*procs)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
} nv;

static void *lib;

static void *sym(const char *name) { return dlsym(lib, name); }

static int load(void)
{
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    nvmlReturn_t (*init)(void) = lib ? (nvmlReturn_t(*)(void))sym("nvmlInit_v2") : NULL;
    if (!init) {
        fprintf(stderr, "nvidia-smi: no NVML: %s\n", lib ? "libnvidia-ml.so.1 has no nvmlInit_v2" : dlerror());
        return -1;
    }
    *(void **)&nv.error_string = sym("nvmlErrorString");
    *(void **)&nv.driver_version = sym("nvmlSystemGetDriverVersion");
    *(void **)&nv.cuda_version = sym("nvmlSystemGetCudaDriverVersion_v2");
    *(void **)&nv.count = sym("nvmlDeviceGetCount_v2");
    *(void **)&nv.by_index = sym("nvmlDeviceGetHandleByIndex_v2");
    *(void **)&nv.name = sym("nvmlDeviceGetName");
    *(void **)&nv.uuid = sym("nvmlDeviceGetUUID");
    *(void **)&nv.serial = sym("nvmlDeviceGetSerial");
    *(void **)&nv.pci = sym("nvmlDeviceGetPciInfo_v3");
    *(void **)&nv.persistence = sym("nvmlDeviceGetPersistenceMode");
    *(void **)&nv.compute_mode = sym("nvmlDeviceGetComputeMode");
    *(void **)&nv.mig_mode = sym("nvmlDeviceGetMigMode");
    *(void **)&nv.cc = sym("nvmlDeviceGetCudaComputeCapability");
    *(void **)&nv.pstate = sym("nvmlDeviceGetPerformanceState");
    *(void **)&nv.fan = sym("nvmlDeviceGetFanSpeed");
    *(void **)&nv.temperature = sym("nvmlDeviceGetTemperature");
    *(void **)&nv.utilization = sym("nvmlDeviceGetUtilizationRates");
    *(void **)&nv.memory_v2 = sym("nvmlDeviceGetMemoryInfo_v2");
    *(void **)&nv.memory = sym("nvmlDeviceGetMemoryInfo");
    *(void **)&nv.power = sym("nvmlDeviceGetPowerUsage");
    *(void **)&nv.power_limit = sym("nvmlDeviceGetPowerManagementLimit");
    *(void **)&nv.enforced_limit = sym("nvmlDeviceGetEnforcedPowerLimit");
    *(void **)&nv.clock = sym("nvmlDeviceGetClockInfo");
    *(void **)&nv.max_clock = sym("nvmlDeviceGetMaxClockInfo");
    *(void **)&nv.procs = sym("nvmlDeviceGetComputeRunningProcesses_v3");
    nvmlReturn_t r = init();
    if (r != NVML_SUCCESS || !nv.count || !nv.by_index) {
        fprintf(stderr, "nvidia-smi: NVML did not start: %s\n",
                r != NVML_SUCCESS && nv.error_string ? nv.error_string(r) : "it lacks the device count");
        return -1;
    }
    return 0;
}

/* A call's answer, NULL-safe: an entry point the library lacks is one it
 * does not support. */
#define CALL(fn, ...) (nv.fn ? nv.fn(__VA_ARGS__) : NVML_ERROR_FUNCTION_NOT_FOUND)

/* --- the devices asked for ------------------------------------------- */

static nvmlDevice_t devs[MAX_DEVS];
static unsigned idx[MAX_DEVS], ndev, nall;

static int device_text(nvmlDevice_t d, char *out, size_t n)
{
    return CALL(uuid, d, out, (unsigned)n) == NVML_SUCCESS ? 0 : -1;
}

/* -i: indices or UUIDs (or their unique prefixes), comma-separated. */
static int select_devices(const char *ids)
{
    if (CALL(count, &nall) != NVML_SUCCESS) {
        fprintf(stderr, "nvidia-smi: NVML cannot count the GPUs\n");
        return EXIT_NO_NVML;
    }
    if (nall > MAX_DEVS) {
        fprintf(stderr, "nvidia-smi: NVML says %u GPUs; this nvidia-smi shows %d at most\n", nall, MAX_DEVS);
        return EXIT_NO_NVML;
    }
    if (!ids) {
        for (ndev = 0; ndev < nall; ndev++)
            if (CALL(by_index, ndev, &devs[ndev]) != NVML_SUCCESS)
                return fprintf(stderr, "nvidia-smi: GPU %u cannot be read\n", ndev), EXIT_NO_NVML;
            else
                idx[ndev] = ndev;
        return 0;
    }
    char *copy = strdup(ids), *save = NULL;
    for (char *id = strtok_r(copy, ",", &save); id; id = strtok_r(NULL, ",", &save)) {
        int found = -1, matches = 0;
        char *end;
        unsigned long i = strtoul(id, &end, 10);
        for (unsigned k = 0; k < nall; k++) {
            nvmlDevice_t d;
            char u[96];
            if (CALL(by_index, k, &d) != NVML_SUCCESS)
                continue;
            if ((*id && !*end && i == k) ||
                (device_text(d, u, sizeof u) == 0 && strlen(id) >= 8 && strncasecmp(u, id, strlen(id)) == 0))
                found = (int)k, matches++;
        }
        if (matches > 1) {
            fprintf(stderr, "\"%s\" matches %d GPUs: give more of a UUID\n", id, matches);
            free(copy);
            return EXIT_NO_DEVICE;
        }
        if (found < 0 || ndev == MAX_DEVS) {
            fprintf(stderr, "No devices were found matching \"%s\" (%u GPU%s here)\n", id, nall, nall == 1 ? "" : "s");
            free(copy);
            return EXIT_NO_DEVICE;
        }
        idx[ndev] = (unsigned)found;
        CALL(by_index, (unsigned)found, &devs[ndev++]);
    }
    free(copy);
    if (!ndev) {
        fprintf(stderr, "No devices were found matching \"%s\" (-i names none)\n", ids);
        return EXIT_NO_DEVICE;
    }
    return 0;
}

/* --- values ---------------------------------------------------------- */

struct out {
    char *s;
    size_t n;
};

static void put(struct out o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o.s, o.n, fmt, ap);
    va_end(ap);
}

/* What a field prints when NVML does not say. */
static void missing(struct out o, nvmlReturn_t r)
{
    put(o, "%s", r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_FUNCTION_NOT_FOUND ? NA
                 : r == NVML_ERROR_NO_PERMISSION                                     ? "[Insufficient Permissions]"
                                                                                     : "[Unknown Error]");
}

static void timestamp(struct out o)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y/%m/%d %H:%M:%S", &tm);
    put(o, "%s.%03ld", day, (long)tv.tv_usec / 1000);
}

/* Memory in bytes, as _v2 gives it (used without what the driver
 * reserves) or, without _v2, as the first version does. */
static nvmlReturn_t memory(nvmlDevice_t d, unsigned long long m[4] /* total, reserved, used, free */)
{
    nvmlMemory_v2_t v2 = {.version = nvmlMemory_v2};
    nvmlReturn_t r = CALL(memory_v2, d, &v2);
    if (r == NVML_SUCCESS) {
        m[0] = v2.total, m[1] = v2.reserved, m[2] = v2.used, m[3] = v2.free;
        return r;
    }
    nvmlMemory_t v1;
    if ((r = CALL(memory, d, &v1)) == NVML_SUCCESS)
        m[0] = v1.total, m[1] = 0, m[2] = v1.used, m[3] = v1.free;
    return r;
}

enum { V_TEXT, V_UINT, V_MIB, V_WATTS, V_PERCENT, V_MHZ };

/* One query field: its name (as the header prints it), another name it is
 * asked by, its unit, and how it is read. */
struct field {
    const char *name, *alias, *unit;
    int kind;
    nvmlReturn_t (*read)(unsigned k, char *text, size_t n, unsigned long long *v);
};

#define DEV devs[k]

static nvmlReturn_t f_timestamp(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)k, (void)v;
    timestamp((struct out){t, n});
    return NVML_SUCCESS;
}
static nvmlReturn_t f_driver(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)k, (void)v;
    return CALL(driver_version, t, (unsigned)n);
}
static nvmlReturn_t f_count(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)k, (void)t, (void)n;
    *v = nall;
    return NVML_SUCCESS;
}
static nvmlReturn_t f_index(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)t, (void)n;
    *v = idx[k];
    return NVML_SUCCESS;
}
static nvmlReturn_t f_name(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)v;
    return CALL(name, DEV, t, (unsigned)n);
}
static nvmlReturn_t f_uuid(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)v;
    return CALL(uuid, DEV, t, (unsigned)n);
}
static nvmlReturn_t f_serial(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)v;
    return CALL(serial, DEV, t, (unsigned)n);
}

/* The PCI fields: which one by what it prints. */
static nvmlReturn_t pci_field(unsigned k, char *t, size_t n, int which)
{
    nvmlPciInfo_t p;
    nvmlReturn_t r = CALL(pci, DEV, &p);
    if (r != NVML_SUCCESS)
        return r;
    struct out o = {t, n};
    switch (which) {
    case 0: put(o, "%s", p.busId); break;
    case 1: put(o, "0x%04X", p.domain); break;
    case 2: put(o, "0x%02X", p.bus); break;
    case 3: put(o, "0x%02X", p.device); break;
    case 4: put(o, "0x%08X", p.pciDeviceId); break;
    default: put(o, "0x%08X", p.pciSubSystemId); break;
    }
    return NVML_SUCCESS;
}
#define PCI_FIELD(fn, which)                                                  \
    static nvmlReturn_t fn(unsigned k, char *t, size_t n, unsigned long long *v) \
    {                                                                         \
        (void)v;                                                              \
        return pci_field(k, t, n, which);                                     \
    }
PCI_FIELD(f_bus_id, 0)
PCI_FIELD(f_domain, 1)
PCI_FIELD(f_bus, 2)
PCI_FIELD(f_device, 3)
PCI_FIELD(f_device_id, 4)
PCI_FIELD(f_sub_device_id, 5)

static nvmlReturn_t f_persistence(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)v;
    nvmlEnableState_t s;
    nvmlReturn_t r = CALL(persistence, DEV, &s);
    if (r == NVML_SUCCESS)
        put((struct out){t, n}, "%s", s == NVML_FEATURE_ENABLED ? "Enabled" : "Disabled");
    return r;
}
static nvmlReturn_t f_compute_mode(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)v;
    static const char *const modes[] = {"Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process"};
    nvmlComputeMode_t m;
    nvmlReturn_t r = CALL(compute_mode, DEV, &m);
    if (r == NVML_SUCCESS)
        put((struct out){t, n}, "%s", (unsigned)m < 4 ? modes[m] : "Unknown");
    return r;
}
static nvmlReturn_t f_cc(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)v;
    int major, minor;
    nvmlReturn_t r = CALL(cc, DEV, &major, &minor);
    if (r == NVML_SUCCESS)
        put((struct out){t, n}, "%d.%d", major, minor);
    return r;
}
static nvmlReturn_t f_pstate(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)v;
    nvmlPstates_t p;
    nvmlReturn_t r = CALL(pstate, DEV, &p);
    if (r == NVML_SUCCESS && p == NVML_PSTATE_UNKNOWN)
        return NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS)
        put((struct out){t, n}, "P%d", (int)p);
    return r;
}
static nvmlReturn_t utilization(unsigned k, unsigned long long *v, int mem)
{
    nvmlUtilization_t u;
    nvmlReturn_t r = CALL(utilization, DEV, &u);
    *v = mem ? u.memory : u.gpu;
    return r;
}
static nvmlReturn_t f_util_gpu(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)t, (void)n;
    return utilization(k, v, 0);
}
static nvmlReturn_t f_util_mem(unsigned k, char *t, size_t n, unsigned long long *v)
{
    (void)t, (void)n;
    return utilization(k, v, 1);
}
#define MEM_FIELD(fn, which)                                                  \
    static nvmlReturn_t fn(unsigned k, char *t, size_t n, unsigned long long *v) \
    {                                                                         \
        (void)t, (void)n;                                                     \
        unsigned long long m[4];                                              \
        nvmlReturn_t r = memory(DEV, m);                                      \
        *v = m[which];                                                        \
        return r;                                                             \
    }
MEM_FIELD(f_mem_total, 0)
MEM_FIELD(f_mem_reserved, 1)
MEM_FIELD(f_mem_used, 2)
MEM_FIELD(f_mem_free, 3)

/* The fields NVML gives as one unsigned int: CALL's arguments but the last. */
#define UINT_FIELD(fn, ...)                                                   \
    static nvmlReturn_t fn(unsigned k, char *t, size_t n, unsigned long long *v) \
    {                                                                         \
        (void)t, (void)n;                                                     \
        unsigned x = 0;                                                       \
        nvmlReturn_t r = CALL(__VA_ARGS__, &x);                               \
        *v = x;                                                               \
        return r;                                                             \
    }
UINT_FIELD(f_fan, fan, DEV)
UINT_FIELD(f_temperature, temperature, DEV, NVML_TEMPERATURE_GPU)
UINT_FIELD(f_power, power, DEV)
UINT_FIELD(f_power_limit, power_limit, DEV)
UINT_FIELD(f_enforced_limit, enforced_limit, DEV)
UINT_FIELD(f_clock_gr, clock, DEV, NVML_CLOCK_GRAPHICS)
UINT_FIELD(f_clock_sm, clock, DEV, NVML_CLOCK_SM)
UINT_FIELD(f_clock_mem, clock, DEV, NVML_CLOCK_MEM)
UINT_FIELD(f_clock_video, clock, DEV, NVML_CLOCK_VIDEO)
UINT_FIELD(f_max_gr, max_clock, DEV, NVML_CLOCK_GRAPHICS)
UINT_FIELD(f_max_sm, max_clock, DEV, NVML_CLOCK_SM)
UINT_FIELD(f_max_mem, max_clock, DEV, NVML_CLOCK_MEM)

static const struct field gpu_fields[] = {
    {"timestamp", NULL, NULL, V_TEXT, f_timestamp},
    {"driver_version", NULL, NULL, V_TEXT, f_driver},
    {"count", NULL, NULL, V_UINT, f_count},
    {"name", "gpu_name", NULL, V_TEXT, f_name},
    {"serial", "gpu_serial", NULL, V_TEXT, f_serial},
    {"uuid", "gpu_uuid", NULL, V_TEXT, f_uuid},
    {"pci.bus_id", "gpu_bus_id", NULL, V_TEXT, f_bus_id},
    {"pci.domain", NULL, NULL, V_TEXT, f_domain},
    {"pci.bus", NULL, NULL, V_TEXT, f_bus},
    {"pci.device", NULL, NULL, V_TEXT, f_device},
    {"pci.device_id", NULL, NULL, V_TEXT, f_device_id},
    {"pci.sub_device_id", NULL, NULL, V_TEXT, f_sub_device_id},
    {"index", NULL, NULL, V_UINT, f_index},
    {"persistence_mode", NULL, NULL, V_TEXT, f_persistence},
    {"compute_mode", NULL, NULL, V_TEXT, f_compute_mode},
    {"compute_cap", NULL, NULL, V_TEXT, f_cc},
    {"pstate", NULL, NULL, V_TEXT, f_pstate},
    {"fan.speed", NULL, "%", V_PERCENT, f_fan},
    {"temperature.gpu", NULL, NULL, V_UINT, f_temperature},
    {"utilization.gpu", NULL, "%", V_PERCENT, f_util_gpu},
    {"utilization.memory", NULL, "%", V_PERCENT, f_util_mem},
    {"memory.total", NULL, "MiB", V_MIB, f_mem_total},
    {"memory.reserved", NULL, "MiB", V_MIB, f_mem_reserved},
    {"memory.used", NULL, "MiB", V_MIB, f_mem_used},
    {"memory.free", NULL, "MiB", V_MIB, f_mem_free},
    {"power.draw", NULL, "W", V_WATTS, f_power},
    {"power.limit", NULL, "W", V_WATTS, f_power_limit},
    {"enforced.power.limit", NULL, "W", V_WATTS, f_enforced_limit},
    {"clocks.current.graphics", "clocks.gr", "MHz", V_MHZ, f_clock_gr},
    {"clocks.current.sm", "clocks.sm", "MHz", V_MHZ, f_clock_sm},
    {"clocks.current.memory", "clocks.mem", "MHz", V_MHZ, f_clock_mem},
    {"clocks.current.video", "clocks.video", "MHz", V_MHZ, f_clock_video},
    {"clocks.max.graphics", "clocks.max.gr", "MHz", V_MHZ, f_max_gr},
    {"clocks.max.sm", NULL, "MHz", V_MHZ, f_max_sm},
    {"clocks.max.memory", "clocks.max.mem", "MHz", V_MHZ, f_max_mem},
};
#define NGPU_FIELDS (sizeof gpu_fields / sizeof gpu_fields[0])

/* A field's value as CSV prints it. */
static void value(const struct field *f, unsigned k, int units, char *out, size_t n)
{
    char text[256] = "";
    unsigned long long v = 0;
    nvmlReturn_t r = f->read(k, text, sizeof text, &v);
    struct out o = {out, n};
    if (r != NVML_SUCCESS) {
        missing(o, r);
        return;
    }
    const char *u = units && f->unit ? f->unit : NULL;
    switch (f->kind) {
    case V_TEXT: put(o, "%s", text); break;
    case V_UINT: put(o, "%llu", v); break;
    case V_MIB: put(o, "%llu%s%s", v >> 20, u ? " " : "", u ? u : ""); break;
    case V_WATTS: put(o, "%.2f%s%s", v / 1000.0, u ? " " : "", u ? u : ""); break;
    default: put(o, "%llu%s%s", v, u ? " " : "", u ? u : ""); break;
    }
}

/* --- the compute processes ------------------------------------------- */

static nvmlReturn_t processes(unsigned k, nvmlProcessInfo_t *p, unsigned *n)
{
    return CALL(procs, DEV, n, p);
}

static void process_name(unsigned pid, char *out, size_t n)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/cmdline", pid);
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(out, 1, n - 1, f) : 0;
    if (f)
        fclose(f);
    out[got] = 0; /* argv[0] ends at its NUL */
    if (!got)
        snprintf(out, n, "%s", NA);
}

enum { P_TIMESTAMP, P_GPU_NAME, P_GPU_BUS_ID, P_GPU_SERIAL, P_GPU_UUID, P_PID, P_NAME, P_MEMORY };

static const struct {
    const char *name, *alias, *unit;
} app_fields[] = {
    [P_TIMESTAMP] = {"timestamp", NULL, NULL},     [P_GPU_NAME] = {"gpu_name", NULL, NULL},
    [P_GPU_BUS_ID] = {"gpu_bus_id", NULL, NULL},   [P_GPU_SERIAL] = {"gpu_serial", NULL, NULL},
    [P_GPU_UUID] = {"gpu_uuid", NULL, NULL},       [P_PID] = {"pid", NULL, NULL},
    [P_NAME] = {"process_name", "name", NULL},     [P_MEMORY] = {"used_gpu_memory", "used_memory", "MiB"},
};
#define NAPP_FIELDS (sizeof app_fields / sizeof app_fields[0])

/* --- options --------------------------------------------------------- */

static void usage(FILE *to)
{
    fprintf(to, "nvidia-smi of FlexGV's remote GPUs: NVIDIA's, through the NVML the loader finds\n\n"
                "  nvidia-smi [-i ID[,ID...]] [-l SEC | -lms MS]            the summary\n"
                "  nvidia-smi -L                                           the GPUs and their UUIDs\n"
                "  nvidia-smi --query-gpu=FIELD,... --format=csv[,noheader][,nounits] [-i ...] [-l ...]\n"
                "  nvidia-smi --query-compute-apps=FIELD,... --format=csv[,noheader][,nounits]\n"
                "  nvidia-smi --help-query-gpu | --help-query-compute-apps | --version | -h\n\n"
                "ID: a GPU's index or its UUID (or a prefix of 8 characters or more).\n"
                "Other options of NVIDIA's nvidia-smi (-q, dmon, pmon, settings) are not answered here.\n");
}

static void help_fields(int gpu)
{
    printf("Fields of %s (a missing reading prints as %s):\n", gpu ? "--query-gpu" : "--query-compute-apps", NA);
    for (size_t i = 0; i < (gpu ? NGPU_FIELDS : NAPP_FIELDS); i++) {
        const char *name = gpu ? gpu_fields[i].name : app_fields[i].name;
        const char *alias = gpu ? gpu_fields[i].alias : app_fields[i].alias;
        const char *unit = gpu ? gpu_fields[i].unit : app_fields[i].unit;
        printf("  %s%s%s%s%s%s\n", name, alias ? " or " : "", alias ? alias : "", unit ? " [" : "", unit ? unit : "",
               unit ? "]" : "");
    }
}

/* The field names of a query, each the index of its table row. */
static int parse_fields(const char *list, int gpu, int *out, int *n)
{
    char *copy = strdup(list), *save = NULL;
    *n = 0;
    for (char *f = strtok_r(copy, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*f))
            f++;
        for (char *e = f + strlen(f); e > f && isspace((unsigned char)e[-1]);)
            *--e = 0;
        int found = -1;
        for (size_t i = 0; i < (gpu ? NGPU_FIELDS : NAPP_FIELDS) && found < 0; i++) {
            const char *name = gpu ? gpu_fields[i].name : app_fields[i].name;
            const char *alias = gpu ? gpu_fields[i].alias : app_fields[i].alias;
            if (strcasecmp(f, name) == 0 || (alias && strcasecmp(f, alias) == 0))
                found = (int)i;
        }
        if (found < 0 || *n == MAX_FIELDS) {
            fprintf(stderr, "Field \"%s\" is not a valid field to query (nvidia-smi --help-query-%s lists them).\n", f,
                    gpu ? "gpu" : "compute-apps");
            free(copy);
            return -1;
        }
        out[(*n)++] = found;
    }
    free(copy);
    if (!*n)
        fprintf(stderr, "nvidia-smi: the query names no field\n");
    return *n ? 0 : -1;
}

static void header(const int *fields, int n, int gpu)
{
    for (int i = 0; i < n; i++) {
        const char *name = gpu ? gpu_fields[fields[i]].name : app_fields[fields[i]].name;
        const char *unit = gpu ? gpu_fields[fields[i]].unit : app_fields[fields[i]].unit;
        printf("%s%s%s%s%s", i ? ", " : "", name, unit ? " [" : "", unit ? unit : "", unit ? "]" : "");
    }
    printf("\n");
}

static void query_gpus(const int *fields, int n, int noheader, int units)
{
    if (!noheader)
        header(fields, n, 1);
    for (unsigned k = 0; k < ndev; k++) {
        for (int i = 0; i < n; i++) {
            char v[256];
            value(&gpu_fields[fields[i]], k, units, v, sizeof v);
            printf("%s%s", i ? ", " : "", v);
        }
        printf("\n");
    }
}

static void query_apps(const int *fields, int n, int noheader, int units)
{
    if (!noheader)
        header(fields, n, 0);
    for (unsigned k = 0; k < ndev; k++) {
        nvmlProcessInfo_t p[64];
        unsigned np = 64;
        if (processes(k, p, &np) != NVML_SUCCESS)
            continue;
        for (unsigned j = 0; j < np; j++) {
            for (int i = 0; i < n; i++) {
                char v[512];
                struct out o = {v, sizeof v};
                switch (fields[i]) {
                case P_TIMESTAMP: timestamp(o); break;
                case P_GPU_NAME: value(&gpu_fields[3], k, units, v, sizeof v); break;
                case P_GPU_BUS_ID: value(&gpu_fields[6], k, units, v, sizeof v); break;
                case P_GPU_SERIAL: value(&gpu_fields[4], k, units, v, sizeof v); break;
                case P_GPU_UUID: value(&gpu_fields[5], k, units, v, sizeof v); break;
                case P_PID: put(o, "%u", p[j].pid); break;
                case P_NAME: process_name(p[j].pid, v, sizeof v); break;
                default:
                    if (p[j].usedGpuMemory == (unsigned long long)NVML_VALUE_NOT_AVAILABLE)
                        put(o, "%s", NA);
                    else
                        put(o, "%llu%s", p[j].usedGpuMemory >> 20, units ? " MiB" : "");
                }
                printf("%s%s", i ? ", " : "", v);
            }
            printf("\n");
        }
    }
}

/* --- the summary ------------------------------------------------------ */

static int row_of(const char *name)
{
    for (size_t i = 0; i < NGPU_FIELDS; i++)
        if (strcmp(gpu_fields[i].name, name) == 0)
            return (int)i;
    abort();
}

/* A summary cell's text: N/A where NVML does not say. */
static void cell(const char *name, unsigned k, char *v, size_t n)
{
    value(&gpu_fields[row_of(name)], k, 0, v, n);
    if (v[0] == '[')
        snprintf(v, n, "N/A");
}

#define LINE "+-----------------------------------------------------------------------------------------+"
#define COLS "+-----------------------------------------+------------------------+----------------------+"

static void summary(void)
{
    char now[64], drv[96] = "N/A", cuda[32] = "N/A", line[256];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(now, sizeof now, "%a %b %e %H:%M:%S %Y", &tm);
    CALL(driver_version, drv, sizeof drv);
    int cv;
    if (CALL(cuda_version, &cv) == NVML_SUCCESS)
        snprintf(cuda, sizeof cuda, "%d.%d", cv / 1000, cv % 1000 / 10);
    printf("%s\n%s\n", now, LINE);
    snprintf(line, sizeof line, " NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %s", "FlexGV", drv, cuda);
    printf("|%-89s|\n%s\n", line, COLS);
    printf("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n"
           "|                                         |                        |               MIG M. |\n"
           "|=========================================+========================+======================|\n");
    for (unsigned k = 0; k < ndev; k++) {
        char name[128], pers[32], bus[64], fan[32], temp[32], pstate[32], mode[32], util[32], mig[32] = "N/A";
        cell("name", k, name, sizeof name);
        cell("persistence_mode", k, pers, sizeof pers);
        cell("pci.bus_id", k, bus, sizeof bus);
        cell("fan.speed", k, fan, sizeof fan);
        cell("temperature.gpu", k, temp, sizeof temp);
        cell("pstate", k, pstate, sizeof pstate);
        cell("compute_mode", k, mode, sizeof mode);
        cell("utilization.gpu", k, util, sizeof util);
        unsigned cur, pend;
        if (CALL(mig_mode, devs[k], &cur, &pend) == NVML_SUCCESS)
            snprintf(mig, sizeof mig, "%s", cur ? "Enabled" : "Disabled");
        unsigned long long m[4], draw = 0, cap = 0;
        char mem[64] = "N/A", pwr[64];
        if (memory(devs[k], m) == NVML_SUCCESS)
            snprintf(mem, sizeof mem, "%lluMiB / %6lluMiB", m[2] >> 20, m[0] >> 20);
        char dw[32] = "N/A", cw[32] = "N/A";
        if (f_power(k, NULL, 0, &draw) == NVML_SUCCESS)
            snprintf(dw, sizeof dw, "%lluW", (draw + 500) / 1000);
        if (f_power_limit(k, NULL, 0, &cap) == NVML_SUCCESS || f_enforced_limit(k, NULL, 0, &cap) == NVML_SUCCESS)
            snprintf(cw, sizeof cw, "%lluW", (cap + 500) / 1000);
        snprintf(pwr, sizeof pwr, "%s / %5s", dw, cw);
        if (strcmp(temp, "N/A") != 0)
            strncat(temp, "C", sizeof temp - strlen(temp) - 1);
        if (strcmp(fan, "N/A") != 0)
            strncat(fan, "%", sizeof fan - strlen(fan) - 1);
        if (strcmp(util, "N/A") != 0)
            strncat(util, "%", sizeof util - strlen(util) - 1);
        if (strcmp(pers, "N/A") != 0)
            snprintf(pers, sizeof pers, "%s", pers[0] == 'E' ? "On" : "Off");
        /* NVIDIA's columns, so that what parses its summary parses this */
        printf("|%4u  %-26.26s %6s  |   %-16.16s %3s |%21s |\n", idx[k], name, pers, bus, "N/A", "N/A");
        printf("| %3s %5s %5s %23s |%23s |%8s%13s |\n", fan, temp, pstate, pwr, mem, util, mode);
        printf("|%41s|%24s|%21s |\n%s\n", "", "", mig, COLS);
    }
    printf("\n%s\n", LINE);
    printf("| Processes:%78s|\n"
           "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n"
           "|        ID   ID                                                               Usage      |\n"
           "|=========================================================================================|\n",
           "");
    int any = 0;
    for (unsigned k = 0; k < ndev; k++) {
        nvmlProcessInfo_t p[64];
        unsigned np = 64;
        if (processes(k, p, &np) != NVML_SUCCESS)
            continue;
        for (unsigned j = 0; j < np; j++, any = 1) {
            char name[512], used[32] = "N/A";
            process_name(p[j].pid, name, sizeof name);
            if (p[j].usedGpuMemory != (unsigned long long)NVML_VALUE_NOT_AVAILABLE)
                snprintf(used, sizeof used, "%lluMiB", p[j].usedGpuMemory >> 20);
            snprintf(line, sizeof line, "  %4u   N/A  N/A  %14u      C   %-35.35s %10s ", idx[k], p[j].pid, name, used);
            printf("|%-89s|\n", line);
        }
    }
    if (!any)
        printf("|  No running processes found%61s|\n", "");
    printf("%s\n", LINE);
}

static void version(void)
{
    char drv[96] = "N/A", nvml[96] = "N/A";
    nvmlReturn_t (*nvml_version)(char *, unsigned) = (nvmlReturn_t(*)(char *, unsigned))sym("nvmlSystemGetNVMLVersion");
    CALL(driver_version, drv, sizeof drv);
    if (nvml_version)
        nvml_version(nvml, sizeof nvml);
    int cv;
    printf("NVIDIA-SMI version  : FlexGV's, for remote GPUs\nNVML version        : %s\nDRIVER version      : %s\n", nvml,
           drv);
    if (CALL(cuda_version, &cv) == NVML_SUCCESS)
        printf("CUDA Version        : %d.%d\n", cv / 1000, cv % 1000 / 10);
}

static void list_gpus(void)
{
    for (unsigned k = 0; k < ndev; k++) {
        char name[128], uuid[128];
        cell("name", k, name, sizeof name);
        cell("uuid", k, uuid, sizeof uuid);
        printf("GPU %u: %s (UUID: %s)\n", idx[k], name, uuid);
    }
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "nvidia-smi: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (nvidia-smi -h lists what this nvidia-smi answers)\n");
    return EXIT_ARGS;
}

/* The value of option `name` (`--name=V`, or `-n V` / `--name V`),
 * moving *i past it; NULL if absent. */
static const char *arg_of(int argc, char **argv, int *i, const char *shrt, const char *lng)
{
    const char *a = argv[*i];
    size_t n = strlen(lng);
    if (strncmp(a, lng, n) == 0 && a[n] == '=')
        return a + n + 1;
    if ((shrt && strcmp(a, shrt) == 0) || strcmp(a, lng) == 0)
        return *i + 1 < argc ? argv[++*i] : "";
    return NULL;
}

/* A whole number of at least min and at most max from text; -1 if it is
 * not one. */
static long number(const char *text, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    return *text && !*end && !errno && v >= min && v <= max ? v : -1;
}

int main(int argc, char **argv)
{
    const char *ids = NULL, *qgpu = NULL, *qapps = NULL, *format = NULL, *v;
    int list = 0, show_version = 0, help_gpu = 0, help_apps = 0;
    long loop_ms = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-L") || !strcmp(a, "--list-gpus"))
            list = 1;
        else if (!strcmp(a, "--version"))
            show_version = 1;
        else if (!strcmp(a, "--help-query-gpu"))
            help_gpu = 1;
        else if (!strcmp(a, "--help-query-compute-apps"))
            help_apps = 1;
        else if ((v = arg_of(argc, argv, &i, "-i", "--id")))
            ids = v;
        else if ((v = arg_of(argc, argv, &i, NULL, "--query-gpu")))
            qgpu = v;
        else if ((v = arg_of(argc, argv, &i, NULL, "--query-compute-apps")))
            qapps = v;
        else if ((v = arg_of(argc, argv, &i, NULL, "--format")))
            format = v;
        else if (!strcmp(a, "-l") || !strcmp(a, "--loop") || !strncmp(a, "--loop=", 7)) {
            /* -l alone repeats every 5 s, as NVIDIA's does */
            const char *s = a[1] == '-' && a[6] == '=' ? a + 7
                            : i + 1 < argc && isdigit((unsigned char)argv[i + 1][0]) ? argv[++i]
                                                                                   : "5";
            long sec = number(s, 1, 86400);
            if (sec < 0)
                return bad("-l %s: want whole seconds, 1 to 86400", s);
            loop_ms = sec * 1000;
        } else if (!strcmp(a, "-lms") || !strcmp(a, "--loop-ms") || !strncmp(a, "--loop-ms=", 10)) {
            const char *s = a[1] == 'l' ? (i + 1 < argc ? argv[++i] : "") : a[9] == '=' ? a + 10 : (i + 1 < argc ? argv[++i] : "");
            long ms = number(s, 1, 86400000);
            if (ms < 0)
                return bad("-lms %s: want whole milliseconds, 1 to 86400000", s);
            loop_ms = ms;
        } else
            return bad("\"%s\" is not answered for FlexGV's remote GPUs", a);
    }
    if (help_gpu || help_apps) {
        help_fields(help_gpu);
        return 0;
    }
    if (qgpu && qapps)
        return bad("%s", "--query-gpu and --query-compute-apps: ask one at a time");
    if ((qgpu || qapps) && list)
        return bad("%s", "-L and a query: ask one at a time");
    int noheader = 0, units = 1;
    if (format && !qgpu && !qapps)
        return bad("--format=%s is for --query-gpu or --query-compute-apps", format);
    if (qgpu || qapps) {
        if (!format)
            return bad("%s", "a query needs --format=csv");
        char *copy = strdup(format), *save = NULL;
        int csv = 0;
        for (char *o = strtok_r(copy, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
            while (*o == ' ')
                o++;
            if (!strcmp(o, "csv"))
                csv = 1;
            else if (!strcmp(o, "noheader"))
                noheader = 1;
            else if (!strcmp(o, "nounits"))
                units = 0;
            else {
                int r = bad("--format: \"%s\" is none of csv, noheader, nounits", o);
                free(copy);
                return r;
            }
        }
        free(copy);
        if (!csv)
            return bad("--format=%s: csv is the format answered", format);
    }
    int fields[MAX_FIELDS], nf = 0;
    if ((qgpu && parse_fields(qgpu, 1, fields, &nf) < 0) || (qapps && parse_fields(qapps, 0, fields, &nf) < 0))
        return EXIT_ARGS;
    if (load() < 0)
        return EXIT_NO_NVML;
    if (show_version) {
        version();
        return 0;
    }
    int r = select_devices(ids);
    if (r)
        return r;
    for (;;) {
        if (list)
            list_gpus();
        else if (qgpu)
            query_gpus(fields, nf, noheader, units);
        else if (qapps)
            query_apps(fields, nf, noheader, units);
        else
            summary();
        if (!loop_ms)
            return 0;
        fflush(stdout);
        struct timespec ts = {loop_ms / 1000, loop_ms % 1000 * 1000000};
        nanosleep(&ts, NULL);
    }
}
