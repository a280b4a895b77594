// Package segment reads and writes one segment file of the write-ahead log:
// a fixed header followed by append-only, CRC-framed records.
//
// # File layout
//
// A segment file is a header of [HeaderSize] bytes followed by frames packed
// back to back. The file is allocated to its full size before the first
// frame is written (zero-filled, allocated with fallocate, which reads as
// zeros, or recycled from a retired segment), so the bytes after the last
// frame are zeros or stale bytes of an older segment; neither is ever
// mistaken for a frame of this one. Stale bytes may hold anything a record
// held, frames included (a log that ships another log's frames, or a
// payload crafted to look like one), and a frame names its segment by a
// sequence anyone can foresee; what keeps them out is the salt, a random
// number drawn when the file becomes this segment, kept in its header and
// seeding every frame's checksum, which no frame written before could
// know.
//
// All integers are little-endian. The layout is FROZEN: changing any byte of
// it requires a new [Version]. A build reads the versions up to its own and
// refuses a later one with [ErrVersion], which is not damage: nothing
// repairs it. A build tells a later version from damage only by a header
// that verifies as this one does, so every later version keeps the magic,
// the version field and the header checksum (of bytes 0..28, at 28) where
// they are: a later header that moved them fails as [ErrBadHeader], which
// Salvage rewrites. The flags and the reserved bytes are 0 in every header
// of the versions this build reads (bytes 16..20 too in version 1); a
// header that verifies with any of them set was written by a later build
// that gave them a meaning, and is refused with [ErrVersion] too, never
// read as if they were 0. A later build may so use a flag without a new
// version only for what no earlier build may read past.
// A new frame kind is a change of the format: a build that adds one
// writes it only in segments whose header this build refuses (a new
// version, or a flag set), never in a segment of an earlier version it
// appends to. So a frame of a kind this build does not know, in a segment
// it reads, is no build's record: [Decode] refuses
// it with [ErrBadType] as it refuses any frame that fails its checks, and
// a scan, and Salvage, take it for damage.
//
// Header (32 bytes):
//
//	offset size field
//	0      8    magic     "WALBSEG\x00"
//	8      2    version   = 2
//	10     2    flags     = 0 (reserved)
//	12     4    sequence  the segment's number in its log (1, 2, 3, ...)
//	16     4    salt      random, drawn when the file became this segment
//	20     8    reserved  = 0
//	28     4    crc       CRC-32C (Castagnoli) of bytes 0..28
//
// Version 1 is version 2 with salt 0 (its bytes 16..20 were reserved, and
// zero): this build reads it, appends to it as such, and writes version 2
// in every file it makes.
//
// Frame (17-byte header, then the body):
//
//	offset size field
//	0      4    crc       CRC-32C of bytes 4..17+length (header rest and
//	                      body), with the segment's salt as initial value
//	                      (crc32.Update(salt, castagnoli, bytes))
//	4      4    length    body length in bytes
//	8      4    sequence  the sequence of the segment the frame was written to
//	12     4    synced    how many bytes of this segment file were durable
//	                      (covered by a completed fdatasync) when the frame
//	                      was written; always <= the frame's own offset
//	16     1    type      low 4 bits: kind; bits 4-5: place in its group;
//	                      bits 6-7: 0
//	17     n    body
//
// Kinds: 1 record (a caller's bytes), 2 seal (the segment is complete; no
// frame follows it; written with an empty body; see below for its synced
// value), 3 padding (bytes skipped by salvage; written with a body of
// zeros). Kind 0 is never written, so
// zero-filled space never parses. [Decode] does not check what the writer
// puts in a seal's or a padding frame's body, nor that synced is at most
// the frame's offset: the checksum vouches for what was written.
//
// Places in a group: 0 full (a group of one), 1 first, 2 middle, 3 last. A
// group is the frames of one atomic append: after a crash either all of its
// frames are in the log or none are, because a group without its last frame
// is part of the torn tail.
//
// # Telling a torn tail from corruption
//
// A scan walks frames from the header. When the frame at offset X fails
// (short, bad checksum, foreign sequence, bad type, or out of its group's
// order), the scan searches the rest of the file for valid frames of this
// segment, at every byte offset except inside the body of a frame it has
// found valid (the 4-byte sequence is a cheap filter before the checksum):
//
//   - none, and the bytes at X are zeros or not a frame of this segment:
//     [EndClean], the log simply ends at X;
//   - none, but X holds a frame header of this segment (its sequence
//     field names this segment), or valid frames of this segment follow
//     whose synced values are all <= X: [EndTorn], the bytes from X were
//     never made durable, so no append that waited for an fdatasync had
//     them; they may be discarded. Stale bytes that happen to hold this segment's sequence
//     at X+8 read as such a header too: the end is then reported torn
//     rather than clean, at the same offset, and nothing is lost;
//   - a valid frame after X whose synced value is > X: [EndCorrupt], bytes
//     that a completed fdatasync had covered no longer verify. They must not
//     be silently dropped.
//
// The search checksums only bytes whose header could start a frame of this
// segment (it names the segment, its length fits in the file, its type is
// one a frame has), each over the length its header gives. Stale bytes
// crafted to pass those checks at every turn with long lengths would make
// that quadratic in the file's size, so a scan checksums would-be frames
// that fail over at most four times the file's size, the frame at X
// included. Whether a checksum fails is known only once it is computed, so
// a scan computes none that, should it fail, would go past that; past that
// it no longer verifies them, and errs towards corruption:
//
//   - classifying the end at X, it reads the headers of the would-be
//     frames left: [EndCorrupt] if any claims a synced value > X (and no
//     more than its own offset, as every frame written has), else
//     [EndTorn] (never [EndClean]: one of them may be a frame);
//   - salvaging, it does not step over the damage at X: the scan ends
//     there with [EndCorrupt]; and where it stepped over damage before,
//     it ends with [EndCorrupt] at the first frame after it that it can
//     no longer verify.
//
// Either way the Report's Cause wraps [ErrTooManyCandidates].
//
// The one case no format can tell apart is damage to the last durable batch
// of the last segment when nothing was written after it: it reads as a torn
// tail. A segment the log sealed at a rotation does not have that blind
// spot: the log makes every byte before the seal durable before it writes
// the seal, and the seal says so (its synced value is its own offset), so
// damage anywhere before a seal that verifies is [EndCorrupt] by the rule
// above. A scan gives the seal no weight beyond its synced value: a seal
// that claims less vouches for no more, and damage to the batch right
// before it reads as a torn tail. Such are the seals of earlier builds of
// the log (the synced value of the batch before them, which that batch's
// fdatasync came after) and those salvage writes (0: it seals what is
// left of a damaged segment, vouching for nothing).
package segment
