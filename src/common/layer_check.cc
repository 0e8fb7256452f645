// Empty translation unit: the layer-check shared libraries (src/CMakeLists.txt)
// consist of one layer's archive linked whole; CMake needs a source to build them.
