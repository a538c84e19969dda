/* Force-included into every shim object: bind the libc functions whose
 * default version moved in glibc 2.34 (libdl and libpthread merged into libc)
 * to their original versions, so libflexgv.so loads in old container images.
 * The build links libdl too, which provides them there. */
#ifndef FLEXGV_GLIBC_FLOOR_H
#define FLEXGV_GLIBC_FLOOR_H
#if defined(__x86_64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
__asm__(".symver dlvsym,dlvsym@GLIBC_2.2.5");
#endif
#endif
