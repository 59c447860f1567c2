# shellcheck shell=bash
# Sourced by the GPU bench scripts: the environment every program they start needs (NVLink multicast off in
# NCCL, PyTorch and NVSHMEM; Open MPI as root; unbuffered Python), and the GPUs written to $1/gpus.txt.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
mkdir -p "$1"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$1/gpus.txt"
