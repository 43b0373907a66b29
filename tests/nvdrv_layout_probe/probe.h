/*
 * alphac nvdrv layout probe: the NVIDIA headers whose facts alphac/nvdrv/abi.py carries.
 *
 * This file is ours; it only includes the published headers (which are NOT part of
 * this repository).  probe.py compiles programs that include this file with gcc,
 * with these include directories (relative to an open-gpu-kernel-modules checkout):
 *
 *   src/common/sdk/nvidia/inc
 *   kernel-open/common/inc
 *   kernel-open/nvidia-uvm
 *   src/nvidia/arch/nvalloc/unix/include
 *
 * and, from an open-gpu-doc checkout, classes/ (for the QMD layouts and the Hopper
 * compute class methods, which the kernel tree does not carry).
 */
#ifndef ALPHAC_NVDRV_PROBE_H
#define ALPHAC_NVDRV_PROBE_H

#include <stddef.h>
#include <stdio.h>
#include <linux/ioctl.h>

/* Core RM API types and the unix escape layer. */
#include "nvtypes.h"
#include "nvmisc.h"
#include "nvstatus.h"
#include "nvos.h"
#include "nv-ioctl-numbers.h"
#include "nv-ioctl.h"
#include "nv_escape.h"
#include "nv-unix-nvos-params-wrappers.h"

/* UVM (the Linux header includes uvm_ioctl.h and uvm_types.h). */
#include "uvm_linux_ioctl.h"

/* Classes. */
#include "class/cl0000.h"
#include "class/cl003e.h"
#include "class/cl0040.h"
#include "class/cl0070.h"
#include "class/cl0071.h"
#include "class/cl0080.h"
#include "class/cl2080.h"
#include "class/cl2080_notification.h"
#include "class/cl9067.h"
#include "class/cl90f1.h"
#include "class/cla06c.h"
#include "class/clc361.h"
#include "class/clc561.h"
#include "class/clc661.h"
#include "class/clc56f.h"
#include "class/clc86f.h"
#include "class/clc7b5.h"
#include "class/clc8b5.h"
#include "class/clc7c0.h"
#include "class/clcbc0.h"
#include "alloc/alloc_channel.h"

/* Controls. */
#include "ctrl/ctrl0000/ctrl0000system.h"
#include "ctrl/ctrl0000/ctrl0000gpu.h"
#include "ctrl/ctrl0080/ctrl0080gpu.h"
#include "ctrl/ctrl0080/ctrl0080gr.h"
#include "ctrl/ctrl2080/ctrl2080gpu.h"
#include "ctrl/ctrl2080/ctrl2080gr.h"
#include "ctrl/ctrl2080/ctrl2080fb.h"
#include "ctrl/ctrl2080/ctrl2080perf.h"
#include "ctrl/ctrlc36f.h"
#include "ctrl/ctrla06c.h"
#include "ctrl/ctrla06f/ctrla06fgpfifo.h"

/* open-gpu-doc: the full Hopper compute and copy classes and the QMD layouts (the kernel
 * tree's clc8b5.h is an excerpt without LINE_COUNT, PITCH_IN/OUT or NOP).  The QMD headers
 * write each field as MW(high:low); consumers define MW themselves.  With MW(x) = x,
 * (1 ? FIELD) is the high bit and (0 ? FIELD) the low bit. */
#define MW(x) x
#include "compute/clcbc0.h"
#include "dma-copy/clc8b5.h"
#include "compute/clc7c0qmd.h"
#include "compute/clcbc0qmd.h"

#endif
