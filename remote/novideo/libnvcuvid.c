/* The video decoder library (libnvcuvid.so.1) as a remote GPU's programs
 * see it: absent. The GPU's video and JPEG engines are not carried to a
 * remote server, and the driver's own copy of this library, loaded beside
 * the remoting libcuda.so.1, reaches for them past the CUDA API and waits
 * forever (nvJPEG's hardware backend did). This library stands first in the
 * remoting folder under the driver's name and needs one that does not exist
 * (Makefile), so a dlopen of it fails, saying why, as it does in a
 * container given the compute libraries alone; libraries that use the
 * engines where present (nvJPEG, FFmpeg's NVDEC) then take their own
 * path. */
