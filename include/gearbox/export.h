// GEARBOX_EXPORT marks the public API: the classes and functions a program
// using gearbox calls. Everything else is hidden (-fvisibility=hidden).
//
// GEARBOX_SHARED is defined when gearbox is built as, or used from, the shared
// library libgearbox (the CMake option GEARBOX_SHARED; the installed package
// defines it for its users): marked symbols are then exported from it. In a
// static build the macro is empty, so a program or library that links
// gearbox statically exports none of gearbox's symbols.
#ifndef GEARBOX_EXPORT_H_
#define GEARBOX_EXPORT_H_

#if defined(GEARBOX_SHARED) && (defined(__GNUC__) || defined(__clang__))
#define GEARBOX_EXPORT __attribute__((visibility("default")))
#else
#define GEARBOX_EXPORT
#endif

#endif  // GEARBOX_EXPORT_H_
