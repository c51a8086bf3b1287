/*
 * rope_neon.h - AArch64 Advanced SIMD (NEON) RoPE kernels (rope_neon.c).
 *
 * Drop-in pe_rope_fn kernels with the contract of pe_rope_{half,inter}_
 * {fwd,back}_f32 (posemb.h) and the same bits.  PE_HAVE_NEON_ROPE is
 * defined where they exist.
 */
#ifndef POSEMB_ROPE_NEON_H
#define POSEMB_ROPE_NEON_H

#include "posemb.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#define PE_HAVE_NEON_ROPE 1
void pe_rope_half_fwd_f32_neon(const pe_rope_loop *L);
void pe_rope_half_back_f32_neon(const pe_rope_loop *L);
void pe_rope_inter_fwd_f32_neon(const pe_rope_loop *L);
void pe_rope_inter_back_f32_neon(const pe_rope_loop *L);
#endif

#endif /* POSEMB_ROPE_NEON_H */
