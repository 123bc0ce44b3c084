# SPDX-License-Identifier: BSD-3-Clause
# The Hopper forward family: wgmma/setmaxnreg kernels, sm_90a machine code only (flashattn_add_sm90a_family in
# cmake/FlashAttnInstances.cmake says how they build and how forward.cu learns they are there).
flashattn_add_sm90a_family(flashattn_forward_sm90
  SOURCES "${CMAKE_CURRENT_LIST_DIR}/forward_sm90.cu"
  FAMILY forward_sm90
  INSTANCE_TEMPLATE "${CMAKE_CURRENT_LIST_DIR}/forward_sm90_instance.cu.in"
  HEAD_DIMS 64 128 256
  ROUTE_DEFINITION FLASHATTN_HAS_SM90A)
