// LI_HD marks code compiled for both the host and the device: the one definition of every value.
#pragma once
#if defined(__CUDACC__)
#define LI_HD __host__ __device__ __forceinline__
#else
#define LI_HD inline
#endif
