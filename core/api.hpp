// LAYERINIT_API marks what liblayerinit.so exports: the library is compiled with hidden visibility
// (cmake/modules.cmake), so a declaration reached from layerinit.hpp carries it (a class: its members,
// vtable and typeinfo, which exceptions caught by type need) and nothing else is exported: no
// detail::, no private header's functions. In-tree users of the internals (tests, the CLI, the
// benchmarks) link the same objects as layerinit_static.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define LAYERINIT_API __attribute__((visibility("default")))
#else
#define LAYERINIT_API
#endif
