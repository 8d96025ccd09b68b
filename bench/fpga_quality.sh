#!/bin/sh
# The FPGA weight image's quality table (fpga/QUANT.md): `tandem eval` of the emulated card on
# the stories260K goldens (400 teacher-forced positions; top-1 agreement with the float64
# reference, mean/max KL(cpu || card) in nats) for a ladder of quantization settings.
#   bench/fpga_quality.sh [build dir]        (about a minute on 2 cores)
B=${1:-build}
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
row() { # bits label spec
    out=$(TANDEM_CACHE_DIR="$cache" TANDEM_FPGA_QUANT="$3" "$B/tandem" eval --model models/stories260K \
        --golden tests/data/golden/stories260K --device fpga-emu --weight-bits "$1" 2>&1 | tail -1)
    echo "$out" | sed -n 's/.*"top1_agreement":\([0-9.]*\),"mean_kl":\([0-9.]*\),"max_kl":\([0-9.]*\).*/\1 \2 \3/p' |
        { read -r t k m && printf '| W%sA8 | %s | %s | %s | %s | `%s` |\n' "$1" "$2" "$t" "$k" "$m" "$3" ||
            printf '| W%sA8 | %s | error | | | `%s` |\n' "$1" "$2" "$3"; }
}
P8="smooth=off,clip=0,gptq=0,calib=0,agroup=0"
echo "| weights | setting | top-1 | mean KL | max KL | TANDEM_FPGA_QUANT |"
echo "|---|---|---:|---:|---:|---|"
row 8 "plain: per-row int8, per-token int8 activations" "$P8"
row 8 "+ activation groups of 8" "smooth=off,clip=0,gptq=0,calib=0,agroup=8"
row 8 "+ clipping search (no calibration)" "smooth=off,clip=1,gptq=0,calib=0,agroup=8"
row 8 "+ calibration: activation-weighted clipping" "smooth=off,clip=1,gptq=0,agroup=8"
row 8 "+ SmoothQuant alpha 0.5" "smooth=0.5,clip=1,gptq=0,agroup=8"
row 8 "+ SmoothQuant alpha searched per matrix" "smooth=search,clip=1,gptq=0,agroup=8"
row 8 "+ GPTQ" "gptq=1"
row 8 "+ GPTQ act-order (default)" ""
for s in 1 2 3 4; do row 8 "default, calibration seed $s" "seed=$s"; done
row 8 "default without smoothing" "smooth=off"
row 8 "default, activation groups of 16" "agroup=16"
row 8 "default, per-token activations" "agroup=0"
row 8 "default, attention q in int8" "qint8=1"
row 8 "default, int8 weights in groups of 16 (fp16 scales)" "wgroup=16,hgroup=16"
P4="wbits=4,smooth=off,clip=0,gptq=0,calib=0,agroup=0"
row 4 "plain: groups of 32, per-token int8 activations" "$P4"
row 4 "+ activation groups of 8" "wbits=4,smooth=off,clip=0,gptq=0,calib=0"
row 4 "+ clipping search (no calibration)" "wbits=4,smooth=off,clip=1,gptq=0,calib=0"
row 4 "+ calibration: activation-weighted clipping" "wbits=4,gptq=0"
row 4 "+ GPTQ (default)" ""
for s in 1 2 3; do row 4 "default, calibration seed $s" "seed=$s"; done
row 4 "default + SmoothQuant searched" "wbits=4,smooth=search"
row 4 "default, GPTQ act-order" "wbits=4,gptq=2"
row 4 "default, 32 x 128 calibration tokens" "wbits=4,calib=32x128"
row 4 "default, groups of 16" "wbits=4,wgroup=16"
row 4 "default, lm_head 4-bit too (groups of 32)" "wbits=4,head=4"
