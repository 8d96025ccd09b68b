/* fpga/image_cache.h — the weight image, cached on disk so that a restart does not quantize
 * the checkpoint again.
 *
 * Key: SHA-256 over the file format and builder versions, the model's fingerprint (config.json and
 * every shard's header and size), the CRC32C of every tensor's bytes (a checkpoint rewritten in
 * place with the same shapes, anywhere, changes the key; about 0.1 s a GiB from the page cache),
 * the canonical quantization settings and the descriptor. File: <dir>/<hex key>.img =
 * a 4096-byte header (magic, version, key, descriptor, section size, CRC32C of each channel
 * section, the settings as text, the header's own CRC32C) + the 32 channel sections.
 *
 * Directory: the caller's, else $TANDEM_CACHE_DIR, else $HOME/.cache/tandem (created 0700);
 * TANDEM_CACHE_DIR=off (or no usable directory: one another user owns, or that group or others
 * may write, is refused with a warning and the reason in why) builds in memory and caches
 * nothing.
 * A file whose size, header, key, descriptor or any section CRC does not match is rejected
 * (and rebuilt over); a new file is written as <name>.tmp.<pid>.<n> (created, never opened
 * where something already is), flushed, then renamed into
 * place, so readers never see a partial image and concurrent builders do not corrupt it.
 *
 * The key reads every byte of the weights once per loaded model while some card holds it
 * (fpga_image_hold): the second card of a daemon on the same model takes the checksums the first
 * one read.
 *
 * Threads: the caller's (the memo of held models has its own lock). Two processes may share a
 * cache directory. */
#ifndef TANDEM_FPGA_IMAGE_CACHE_H
#define TANDEM_FPGA_IMAGE_CACHE_H
#include "fpga/image.h"

typedef struct fpga_image_file {
    fpga_dec_desc desc;
    fpga_dec_layout lo;
    const uint8_t *data;  /* FPGA_DEC_CH sections of lo.image_bytes */
    int from_cache;       /* 1: a valid cached file was used (nothing was quantized) */
    int cached;           /* 1: the image is on disk (hit, or stored after the build) */
    char path[1100];      /* the cache file ("" when not cached) */
    char why[160];        /* why a cached file or the cache directory was refused ("": none) */
    void *map;
    size_t map_bytes;
} fpga_image_file;

/* Finds or builds the image for (m, q). ref: what a build calibrates on (fpga_image_build; may be
 * NULL with calibration off). dir may be NULL. rep (may be NULL) describes a build. 0, or -1
 * with a message (a model the card cannot run, out of memory). */
int fpga_image_get(const model *m, const fpga_quant_opts *q, const fpga_calib_ref *ref,
                   const char *dir, fpga_image_file *out, fpga_image_report *rep, char *err,
                   size_t errlen);
void fpga_image_release(fpga_image_file *f);

/* A card holds its model from open (before fpga_image_get) to close (fpga_image_drop, once per
 * hold): while m is held, its weights' checksums are read at most once (the first key made) and
 * kept. Keyed on the model object in memory, not on a path (the bytes behind a path can change
 * between two loads), and safe: a loaded model is immutable (model/ckpt/model.h) and outlives
 * every device opened on it (fpga/backend.h), so while it is held it can be neither freed nor
 * replaced by another model at the same address; the memo goes with the last drop, and a model
 * loaded after that is read anew. (A checkpoint rewritten in place under a running process
 * breaks the model's promise for every device; here every card then gets the image of the bytes
 * the first one read, one image for all.) 0, or -1 out of memory (nothing held: keys are then read
 * each time, and no drop is due). Any thread. */
int fpga_image_hold(const model *m);
void fpga_image_drop(const model *m);
/* How many times this process has read every byte of a model's weights for a key (tests). */
uint64_t fpga_image_weights_read(void);

#endif
