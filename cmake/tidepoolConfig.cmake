# find_package(tidepool): the targets tidepool::tidepool (libtidepool.so) and tidepool::tidepool_static
# (libtidepool.a, which needs the threads library, libdl and libm: they come with it).
include(CMakeFindDependencyMacro)
find_dependency(Threads)
include("${CMAKE_CURRENT_LIST_DIR}/tidepoolTargets.cmake")
