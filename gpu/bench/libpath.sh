# gpu/bench/libpath.sh — sourced by the device scripts (run_all.sh, flex_e2e.sh) after they set
# BINS: makes the prebuilt binaries load on the lent GPU machine. Defines missing() (the libraries
# ldd cannot find for $BINS) and extends LD_LIBRARY_PATH with the CUDA libraries found outside
# /usr/local/cuda/lib64 (the plugin's rpath) and with jansson/libcrypto from rt/ (copied by
# gpu/bench/prebuild.sh, used only where the machine lacks them).
missing() { ldd $BINS 2>&1 | grep "not found" | sort -u; }
if [ -n "$(missing)" ]; then
    for lib in libcublas.so.13 libcudart.so.13 libcublasLt.so.13; do
        if missing | grep -q $lib; then
            p=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
            [ -n "$p" ] && export LD_LIBRARY_PATH="$(dirname "$p")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        fi
    done
    if [ -d rt ] && missing | grep -q "libjansson\|libcrypto"; then
        mkdir -p /tmp/tandem-rt
        for f in rt/*; do missing | grep -q "$(basename "$f")" && cp "$f" /tmp/tandem-rt/; done
        export LD_LIBRARY_PATH="/tmp/tandem-rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
fi
