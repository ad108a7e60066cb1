//! Just enough of an eBPF assembler for [`super::programs`]: the
//! instructions they use, and jumps to named labels resolved at the end.
//! (The programs are a few dozen instructions: a compiler toolchain for
//! BPF, clang or bpf-linker, would be a build dependency for that.)

/// One eBPF instruction (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    pub code: u8,
    /// Destination register in the low nibble, source in the high one.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

/// A register, `r0` to `r10` (`r10`: the frame pointer, read-only).
pub type Reg = u8;

pub const ALU64: u8 = 0x07;
pub const JMP: u8 = 0x05;
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const MEM: u8 = 0x60;
const ATOMIC: u8 = 0xc0;
/// Operand sizes.
pub const W: u8 = 0x00;
pub const H: u8 = 0x08;
pub const B: u8 = 0x10;
pub const DW: u8 = 0x18;
/// The operand is the immediate (`K`) or the source register (`X`).
pub const K: u8 = 0x00;
pub const X: u8 = 0x08;
/// ALU operations.
pub const ADD: u8 = 0x00;
pub const SUB: u8 = 0x10;
pub const AND: u8 = 0x50;
pub const LSH: u8 = 0x60;
pub const RSH: u8 = 0x70;
pub const MOV: u8 = 0xb0;
/// Jump conditions (unsigned).
pub const JEQ: u8 = 0x10;
pub const JNE: u8 = 0x50;
pub const JLT: u8 = 0xa0;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
/// `src_reg` of a 64-bit immediate load that names a map by its fd.
const PSEUDO_MAP_FD: u8 = 1;

fn insn(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

/// `dst = dst <op> imm` (64-bit).
pub fn alu_k(op: u8, dst: Reg, imm: i32) -> Insn {
    insn(ALU64 | op | K, dst, 0, 0, imm)
}

/// `dst = dst <op> src` (64-bit).
pub fn alu_x(op: u8, dst: Reg, src: Reg) -> Insn {
    insn(ALU64 | op | X, dst, src, 0, 0)
}

/// `dst = *(size *)(src + off)`.
pub fn load(size: u8, dst: Reg, src: Reg, off: i16) -> Insn {
    insn(LDX | MEM | size, dst, src, off, 0)
}

/// `*(size *)(dst + off) = src`.
pub fn store(size: u8, dst: Reg, off: i16, src: Reg) -> Insn {
    insn(STX | MEM | size, dst, src, off, 0)
}

/// `*(size *)(dst + off) = imm`.
pub fn store_k(size: u8, dst: Reg, off: i16, imm: i32) -> Insn {
    insn(ST | MEM | size, dst, 0, off, imm)
}

/// `*(u64 *)(dst + off) += src`, atomically.
pub fn atomic_add(dst: Reg, off: i16, src: Reg) -> Insn {
    insn(STX | ATOMIC | DW, dst, src, off, 0)
}

/// Calls helper `n`: arguments in r1–r5, result in r0; r1–r5 are lost.
pub fn call(helper: i32) -> Insn {
    insn(JMP | CALL, 0, 0, 0, helper)
}

pub fn exit() -> Insn {
    insn(JMP | EXIT, 0, 0, 0, 0)
}

/// `dst = the map with this fd` (two instruction slots).
pub fn load_map(dst: Reg, map_fd: i32) -> [Insn; 2] {
    [
        insn(0x18, dst, PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
    ]
}

/// A program under construction: jumps name their target, and
/// [`Program::finish`] turns names into offsets.
#[derive(Default)]
pub struct Program {
    insns: Vec<Insn>,
    jumps: Vec<(usize, &'static str)>,
    labels: Vec<(&'static str, usize)>,
}

impl Program {
    pub fn push(&mut self, i: Insn) -> &mut Self {
        self.insns.push(i);
        self
    }

    pub fn push_map(&mut self, i: [Insn; 2]) -> &mut Self {
        self.insns.extend(i);
        self
    }

    /// `if dst <cond> imm goto label`.
    pub fn jump_k(&mut self, cond: u8, dst: Reg, imm: i32, label: &'static str) -> &mut Self {
        self.jumps.push((self.insns.len(), label));
        self.push(insn(JMP | cond | K, dst, 0, 0, imm))
    }

    pub fn label(&mut self, name: &'static str) -> &mut Self {
        self.labels.push((name, self.insns.len()));
        self
    }

    /// The instructions, jumps resolved. Panics on a label used and not
    /// placed (a bug in the program's text, caught by its tests).
    pub fn finish(mut self) -> Vec<Insn> {
        for &(at, name) in &self.jumps {
            let to = self
                .labels
                .iter()
                .find(|l| l.0 == name)
                .unwrap_or_else(|| panic!("no label {name}"))
                .1;
            self.insns[at].off = (to as i64 - at as i64 - 1) as i16;
        }
        self.insns
    }
}
