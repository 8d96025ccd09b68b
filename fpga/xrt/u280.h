/* fpga/xrt/u280.h — facts about the Alveo U280 that host code and the emulator share.
 *
 * Every number says where it comes from; the timing constants are the emulator's model
 * (fpga/emu/emu_timing.c explains how each is used). */
#ifndef TANDEM_FPGA_U280_H
#define TANDEM_FPGA_U280_H
#include <stdint.h>

/* HBM2: 8 GiB as 32 pseudo-channels of 256 MiB (AMD UG1393 "HBM Configuration and Use";
 * xbutil reports 256 MB banks, XRT issue/PR #4527). */
#define FPGA_U280_HBM_BANKS      32
#define FPGA_U280_HBM_BANK_BYTES (256ULL << 20)
#define FPGA_U280_HBM_BYTES      (FPGA_U280_HBM_BANKS * FPGA_U280_HBM_BANK_BYTES)

/* Peak per pseudo-channel: 460 GB/s / 32 = 14.375 GB/s (UG1393). */
#define FPGA_U280_HBM_PC_BPS 14.375e9
/* Utilisation of that peak for long sequential streams: Shuhai (Wang et al., FCCM 2020)
 * measured ~420 of 460 GB/s on the U280 with all channels busy = 0.913; we round down to 0.90
 * because a kernel also pays refresh and read/write turnarounds that the benchmark avoids. */
#define FPGA_U280_HBM_UTIL 0.90
/* Fixed cost of one kernel-level memory command (one GLITCHES-style LD/ST, which the datamover
 * splits into back-to-back AXI bursts): the issue slot plus the pipeline refill between commands.
 * GLITCHES (Fig. 5, Sec. IV) shows commands under ~32 KB wasting most of the bandwidth; 64 cycles
 * at the kernel clock (284 ns) makes an 8 KB command reach 69 % and a 32 KB one 90 % of the
 * streaming rate, which reproduces their 8 KB -> 32 KB merge gain (~1.2-1.3x). A model
 * parameter, not a measurement. */
#define FPGA_U280_CMD_CYCLES 64
/* Kernel clock: FlightLLM and GLITCHES' U280 design run at 225 MHz. */
#define FPGA_U280_KERNEL_HZ 225e6
/* Host-observed cost of one kernel run with no work, xrtRunStart -> completion seen by
 * xrtRunWait: 50 us, the low end of the 50-100 us reported on an HBM Alveo (U55C, XRT issue
 * #8687) and of the 16-56 us start + ~55 us wait reported on XRT 2.12 (XRT issue #6601). */
#define FPGA_U280_RUN_OVERHEAD_NS 50000.0
/* PCIe Gen3 x16 through XDMA: xbutil dmatest reports 9.6-12.2 GB/s per direction with 256 MB
 * buffers on Alveo cards (XRT PRs #937, #2065, #2540); we use 11 GB/s both ways. A 4 KB
 * transfer runs at ~720 MB/s (XRT issue #6787, U50 gen3x16 xdma) = 5.7 us, of which 0.4 us is
 * the bytes: ~5 us of fixed cost per sync. */
#define FPGA_U280_PCIE_BPS     11e9
#define FPGA_U280_SYNC_OVERHEAD_NS 5000.0

/* DDR4: two banks of 16 GB, DDR4-2400 with a 64-bit data bus (72 with ECC) each: 2400 MT/s x 8 B
 * = 19.2 GB/s peak per bank, 38.4 GB/s in all (AMD DS963 "Alveo U280 Data Center Accelerator
 * Card Data Sheet", Table 1; UG1314 "U280 ... Memory"). In the emulator's address space they
 * follow HBM: DDR[i] at FPGA_U280_HBM_BYTES + i x 16 GiB. */
#define FPGA_U280_DDR_BANKS      2
#define FPGA_U280_DDR_BANK_BYTES (16ULL << 30)
#define FPGA_U280_DDR_BPS        19.2e9
/* Achieved fraction of that peak for long sequential bursts: 0.80, a model parameter (DDR4
 * controllers lose refresh, activates and read/write turnarounds that HBM's pseudo-channels
 * hide better; Shuhai, FCCM 2020, measured the U280's DDR4 channels reaching ~80-90 % of peak
 * for large bursts; we take the low end). Each command pays FPGA_U280_CMD_CYCLES as in HBM. */
#define FPGA_U280_DDR_UTIL       0.80
/* Host memory the kernels reach over PCIe (XRT's HOST[0] bank: a shell with host-memory access,
 * BOs with XCL_BO_FLAGS_HOST_ONLY): the emulator maps 16 GiB of it after DDR4 and charges it at
 * the PCIe rate, FPGA_U280_PCIE_BPS (no utilisation factor: that rate is already measured). */
#define FPGA_U280_HOST_BANK_BYTES (16ULL << 30)
/* The banks past HBM, each 16 GiB of the address space: DDR[0], DDR[1], HOST[0]. */
#define FPGA_U280_EXT_BANKS      3
#define FPGA_U280_EXT_HOST       2 /* the host bank's index among them */
#define FPGA_U280_EXT_BANK_BYTES (16ULL << 30)
#define FPGA_U280_MEM_BYTES (FPGA_U280_HBM_BYTES + FPGA_U280_EXT_BANKS * FPGA_U280_EXT_BANK_BYTES)
/* Memory channels of the address space: 32 HBM pseudo-channels, then the banks past HBM. */
#define FPGA_U280_CHANS (FPGA_U280_HBM_BANKS + FPGA_U280_EXT_BANKS)

static inline int fpga_u280_chan_of(uint64_t addr)
{
    return addr < FPGA_U280_HBM_BYTES
               ? (int)(addr / FPGA_U280_HBM_BANK_BYTES)
               : FPGA_U280_HBM_BANKS + (int)((addr - FPGA_U280_HBM_BYTES) / FPGA_U280_EXT_BANK_BYTES);
}
/* First address of channel ch (ch = FPGA_U280_CHANS: the end of the address space). */
static inline uint64_t fpga_u280_chan_lo(int ch)
{
    return ch <= FPGA_U280_HBM_BANKS
               ? (uint64_t)ch * FPGA_U280_HBM_BANK_BYTES
               : FPGA_U280_HBM_BYTES + (uint64_t)(ch - FPGA_U280_HBM_BANKS) * FPGA_U280_EXT_BANK_BYTES;
}
/* The streaming rate of bank i past HBM (bytes/s). */
static inline double fpga_u280_ext_bps(int i)
{
    return i == FPGA_U280_EXT_HOST ? FPGA_U280_PCIE_BPS : FPGA_U280_DDR_BPS * FPGA_U280_DDR_UTIL;
}

#endif
