#!/usr/bin/env bash
# Run a TritonForge image with the flags Ray, NCCL and the evaluator's sandbox need:
#   docker/run.sh tritonforge:cuda kbench check --level 1 --problem-id 1 --kernel k.py --device cuda
#   docker/run.sh --rocm tritonforge:rocm smart rl configs/rl.yaml
set -euo pipefail
usage() {
  cat <<'USAGE'
usage: docker/run.sh [options] IMAGE [COMMAND ...]     (COMMAND defaults to the image's bash)

options:
  --rocm            AMD GPUs (/dev/kfd, /dev/dri, group video) instead of --gpus all
  --cpu             no GPU flags (the evaluator runs under the Triton interpreter)
  --seccomp FILE    seccomp profile with the sandbox's syscalls (default: docker/seccomp-sandbox.json);
                    make it once per Docker version:  docker/run.sh --make-seccomp DEFAULT.json
  --make-seccomp F  write docker/seccomp-sandbox.json from Docker's default profile F, then exit
  --private-ipc     the container's own IPC namespace with --shm-size=$TF_SHM_SIZE (default 32g)
                    instead of --ipc=host (a shared machine where the host's IPC is not to be joined)
  --host-net        --network host: a Ray cluster or NCCL across machines (Ray's ports, NCCL's sockets)
  --dry-run         print the docker command instead of running it
  -h, --help        this help

what each flag is for:
  --gpus all / --device ...         the GPUs
  --ipc=host                        NCCL's and Ray's shared memory (Ray's object store lives in /dev/shm;
                                    Docker's default /dev/shm is 64 MB)
  --ulimit memlock=-1               pinned host memory for NCCL and CUDA IPC
  --ulimit stack=67108864           NVIDIA's recommended stack for its containers
  --ulimit nofile=65536:65536       Ray opens many sockets and files per worker
  --security-opt seccomp=FILE, apparmor=unconfined, systempaths=unconfined
                                    the sandbox makes its own user, PID, mount and network namespaces
                                    and mounts a fresh /proc (docs/evaluator.md, docker/seccomp_profile.py)
  -v $PWD/runs:/opt/tritonforge/runs, -v ~/.cache/huggingface   runs and models outlive the container
environment passed through when set: HF_TOKEN, WANDB_API_KEY, WANDB_MODE, OPENAI_API_KEY
USAGE
}

here="$(cd "$(dirname "$0")" && pwd)"
gpu=(--gpus all)
seccomp="$here/seccomp-sandbox.json"
net=()
ipc=(--ipc=host)
dry=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --rocm) gpu=(--device=/dev/kfd --device=/dev/dri --group-add video); shift ;;
    --cpu) gpu=(); shift ;;
    --seccomp) seccomp="$2"; shift 2 ;;
    --make-seccomp) python3 "$here/seccomp_profile.py" "$2" > "$here/seccomp-sandbox.json"
                    echo "wrote $here/seccomp-sandbox.json"; exit 0 ;;
    --private-ipc) ipc=(--shm-size="${TF_SHM_SIZE:-32g}"); shift ;;
    --host-net) net=(--network host); shift ;;
    --dry-run) dry=1; shift ;;
    -*) echo "docker/run.sh: unknown option $1; see docker/run.sh --help" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [[ $# -eq 0 ]]; then
  echo "docker/run.sh: name the image, e.g. docker/run.sh tritonforge:cuda kbench --help" >&2
  exit 2
fi
if [[ ! -f "$seccomp" && -z "$dry" ]]; then
  echo "docker/run.sh: no seccomp profile at $seccomp: make it with docker/run.sh --make-seccomp DEFAULT.json" \
       "(Docker's default profile for your version; docker/seccomp_profile.py's docstring shows where)" >&2
  exit 2
fi
image="$1"; shift
envs=()
for v in HF_TOKEN WANDB_API_KEY WANDB_MODE OPENAI_API_KEY; do
  if [[ -n "${!v:-}" ]]; then envs+=(-e "$v"); fi
done
tty=()
if [[ -t 0 && -t 1 ]]; then tty=(-it); fi  # -it off a terminal: "the input device is not a TTY"
cmd=(docker run --rm "${tty[@]}" "${gpu[@]}" "${net[@]}" "${ipc[@]}"
     --ulimit memlock=-1 --ulimit stack=67108864 --ulimit nofile=65536:65536
     --security-opt "seccomp=$seccomp" --security-opt apparmor=unconfined --security-opt systempaths=unconfined
     -v "$PWD/runs:/opt/tritonforge/runs" -v "${HOME}/.cache/huggingface:/root/.cache/huggingface"
     "${envs[@]}" "$image" "$@")
if [[ -n "$dry" ]]; then
  printf '%q ' "${cmd[@]}"; echo
else
  mkdir -p runs
  exec "${cmd[@]}"
fi
