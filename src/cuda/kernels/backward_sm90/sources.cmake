# The Hopper backward family: the wgmma main kernel, sm_90a machine code only (flashattn_add_sm90a_family in
# cmake/FlashAttnInstances.cmake). d64 stays on the portable kernel: this tile measured 0.84-1.02x FLASH there
# (portable 0.84-1.10x). d256 has its own kernel (64 keys per CTA, dK/dV split by columns: NOTES.md).
flashattn_add_sm90a_family(flashattn_backward_sm90
  SOURCES "${CMAKE_CURRENT_LIST_DIR}/backward_sm90.cu"
  HEAD_DIMS 128 256
  ROUTE_DEFINITION FLASHATTN_HAS_SM90A_BACKWARD)
