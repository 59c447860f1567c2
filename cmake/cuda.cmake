# The CUDA backend: detects the toolkit, cuDNN, NCCL and the cudnn-frontend headers, and defines
#   tandem_device_arena  the arena bookkeeping (plain C++, always built: its test needs no GPU)
#   tandem_device_cuda   CudaDevice (links tandem_device, CUDA::cudart)
#   tandem_ops_cuda      the op set on CUDA tensors (cuBLASLt, cuDNN, our kernels)
#   tandem::nccl         an imported target for the communication module
# Include it from the root CMakeLists.txt after project() and before add_subdirectory(src/tandem), so that
# TANDEM_WITH_CUDA=1 reaches every target that dispatches on it.

option(TANDEM_CUDA "Build the CUDA backend when the toolkit is found" ON)
set(TANDEM_CUDNN_FRONTEND_INCLUDE "" CACHE PATH
    "Folder holding cudnn_frontend.h (found automatically in .deps/, third_party_headers/ or python site-packages)")

set(_tandem_root ${CMAKE_CURRENT_LIST_DIR}/..)
get_filename_component(_tandem_root ${_tandem_root} ABSOLUTE)

add_library(tandem_device_arena STATIC ${_tandem_root}/src/tandem/device/cuda/arena.cc)
target_include_directories(tandem_device_arena PUBLIC ${_tandem_root}/src)
target_link_libraries(tandem_device_arena PUBLIC tandem_core)

set(TANDEM_WITH_CUDA OFF CACHE BOOL "Whether the CUDA backend is built (set by cmake/cuda.cmake)" FORCE)
if(NOT TANDEM_CUDA)
  message(STATUS "Tandem CUDA backend: off (TANDEM_CUDA=OFF)")
  return()
endif()

include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  # H200 / H100: sm_90 machine code, plus PTX so a newer GPU can JIT it.
  set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual")
endif()
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "Tandem CUDA backend: off (no CUDA compiler found)")
  return()
endif()

# One CUDA runtime for the whole program: nvcc-compiled objects and the .cc files must not mix the static and the
# shared libcudart (two runtimes would each hold their own streams and registered kernels).
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
# C++20 for .cu files. nvcc 12+ takes -std=c++20, but older CMake (3.25 here) does not know that flag for nvcc and
# then refuses CUDA_STANDARD 20 (which a CUDA target inherits from CXX_STANDARD), so tell it.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)

# cuDNN and NCCL sit in the system places or inside the toolkit.
set(_tandem_cuda_hints ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
find_path(TANDEM_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(TANDEM_CUDNN_LIBRARY cudnn HINTS ${_tandem_cuda_hints} PATH_SUFFIXES lib64 lib)
find_path(TANDEM_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(TANDEM_NCCL_LIBRARY nccl HINTS ${_tandem_cuda_hints} PATH_SUFFIXES lib64 lib)
foreach(var TANDEM_CUDNN_INCLUDE_DIR TANDEM_CUDNN_LIBRARY TANDEM_NCCL_INCLUDE_DIR TANDEM_NCCL_LIBRARY)
  if(NOT ${var})
    message(FATAL_ERROR "CUDA toolkit found but ${var} was not: install cuDNN 9 and NCCL, or configure with "
                        "-DTANDEM_CUDA=OFF")
  endif()
endforeach()
add_library(tandem::cudnn UNKNOWN IMPORTED)
set_target_properties(tandem::cudnn PROPERTIES IMPORTED_LOCATION ${TANDEM_CUDNN_LIBRARY}
                                               INTERFACE_INCLUDE_DIRECTORIES ${TANDEM_CUDNN_INCLUDE_DIR})
add_library(tandem::nccl UNKNOWN IMPORTED)
set_target_properties(tandem::nccl PROPERTIES IMPORTED_LOCATION ${TANDEM_NCCL_LIBRARY}
                                              INTERFACE_INCLUDE_DIRECTORIES ${TANDEM_NCCL_INCLUDE_DIR})

# cudnn-frontend (header only) gives the fused flash attention; without it attention runs our plain kernels.
if(NOT TANDEM_CUDNN_FRONTEND_INCLUDE)
  file(GLOB _tandem_venv_include ${_tandem_root}/build/pyvenv/lib/python3*/site-packages/include)
  set(_tandem_fe_hints ${_tandem_venv_include} ${_tandem_root}/.deps/cudnn_frontend/include
                       ${_tandem_root}/third_party_headers/cudnn_frontend/include)
  find_program(_tandem_python3 python3)
  if(_tandem_python3)
    execute_process(COMMAND ${_tandem_python3} -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                    OUTPUT_VARIABLE _tandem_site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_tandem_site)
      list(APPEND _tandem_fe_hints ${_tandem_site}/include ${_tandem_site}/cudnn/include)
    endif()
  endif()
  find_path(_tandem_fe_found cudnn_frontend.h HINTS ${_tandem_fe_hints} NO_DEFAULT_PATH)
  if(_tandem_fe_found)
    set(TANDEM_CUDNN_FRONTEND_INCLUDE ${_tandem_fe_found} CACHE PATH "Folder holding cudnn_frontend.h" FORCE)
  endif()
  unset(_tandem_fe_found CACHE)
endif()

set(TANDEM_WITH_CUDA ON CACHE BOOL "Whether the CUDA backend is built (set by cmake/cuda.cmake)" FORCE)
add_compile_definitions(TANDEM_WITH_CUDA=1)

# The project's warning flags (and sanitizer flags) are host-compiler flags: nvcc takes them through -Xcompiler.
function(tandem_cuda_host_flags target)
  get_target_property(opts ${target} COMPILE_OPTIONS)
  if(NOT opts)
    return()
  endif()
  set(mapped "")
  foreach(opt IN LISTS opts)
    list(APPEND mapped "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${opt}>" "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${opt}>")
  endforeach()
  set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${mapped}")
endfunction()

set(_tandem_dev ${_tandem_root}/src/tandem/device/cuda)
add_library(tandem_device_cuda STATIC ${_tandem_dev}/cuda_device.cc ${_tandem_dev}/pinned_host_device.cc)
target_include_directories(tandem_device_cuda PUBLIC ${_tandem_root}/src)
target_link_libraries(tandem_device_cuda PUBLIC tandem_device tandem_device_arena CUDA::cudart)

set(_tandem_ops ${_tandem_root}/src/tandem/ops/cuda)
add_library(tandem_ops_cuda STATIC
  ${_tandem_ops}/adamw.cu
  ${_tandem_ops}/backend.cc
  ${_tandem_ops}/copy_columns.cc
  ${_tandem_ops}/cross_entropy.cu
  ${_tandem_ops}/dropout.cu
  ${_tandem_ops}/random_fill.cu
  ${_tandem_ops}/elementwise.cu
  ${_tandem_ops}/embedding.cu
  ${_tandem_ops}/fp8_amax.cu
  ${_tandem_ops}/fp8_quantize.cu
  ${_tandem_ops}/gemm.cc
  ${_tandem_ops}/gemm_plan.cc
  ${_tandem_ops}/grouped_gemm.cu
  ${_tandem_ops}/layernorm.cu
  ${_tandem_ops}/op_timer.cc
  ${_tandem_ops}/reduce.cu
  ${_tandem_ops}/rmsnorm.cu
  ${_tandem_ops}/head_norm.cu
  ${_tandem_ops}/rotary.cu
  ${_tandem_ops}/swiglu.cu
  ${_tandem_ops}/moe.cu
  ${_tandem_ops}/attention_gqa.cc
  ${_tandem_ops}/attention_cudnn.cc
  ${_tandem_ops}/attention_cudnn_blocks.cc
  ${_tandem_ops}/attention_gqa.cu
  ${_tandem_ops}/attention_pair.cu
  ${_tandem_ops}/attention_blocks.cu
  ${_tandem_ops}/attention_flash_forward.cu
  ${_tandem_ops}/attention_flash_backward.cu)
target_include_directories(tandem_ops_cuda PUBLIC ${_tandem_root}/src)
# nvrtc: cudnn-frontend compiles some of its engines at run time.
# cublas: the experts' grouped products in one call (grouped_gemm.cu); every other product is cuBLASLt's.
target_link_libraries(tandem_ops_cuda PUBLIC tandem_device_cuda CUDA::cublas CUDA::cublasLt CUDA::cudart CUDA::nvrtc
                                             tandem::cudnn)
tandem_cuda_host_flags(tandem_ops_cuda)
# -lineinfo: kernel source lines in profilers at no runtime cost. (After the mapping above: an nvcc flag.)
target_compile_options(tandem_ops_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
if(TANDEM_CUDNN_FRONTEND_INCLUDE)
  # SYSTEM: the library's own headers are not ours to warn about. Its bundled JSON is not needed (no graph
  # serialisation here) and would sit beside the project's nlohmann_json.
  target_include_directories(tandem_ops_cuda SYSTEM PRIVATE ${TANDEM_CUDNN_FRONTEND_INCLUDE})
  # -O1: they build and launch cuDNN's graphs (host code that runs once a call beside milliseconds of kernels), and
  # the frontend's templates took 53 s to compile at -O3 against 30 at -O1 (attention_cudnn.cc).
  set_source_files_properties(${_tandem_ops}/attention_cudnn.cc ${_tandem_ops}/attention_cudnn_blocks.cc PROPERTIES
                              COMPILE_DEFINITIONS "TANDEM_HAVE_CUDNN_FRONTEND=1;CUDNN_FRONTEND_SKIP_JSON_LIB=1"
                              COMPILE_OPTIONS "-O1")
  set(_tandem_attention "cuDNN fused attention (cudnn-frontend at ${TANDEM_CUDNN_FRONTEND_INCLUDE})")
else()
  set(_tandem_attention "plain attention kernels only: cudnn_frontend.h not found, set TANDEM_CUDNN_FRONTEND_INCLUDE")
endif()

message(STATUS "Tandem CUDA backend: on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
               "${CMAKE_CUDA_ARCHITECTURES}; cuDNN ${TANDEM_CUDNN_LIBRARY}; NCCL ${TANDEM_NCCL_LIBRARY}; "
               "${_tandem_attention})")
