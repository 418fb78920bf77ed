//! A chain of dependent kernels that do almost nothing, to measure what one kernel
//! boundary costs: `links` launches of [`relay`], each reading the whole output of the one
//! before (as a decode step's GEMV reads its whole input row) and adding one.
//!
//! On an overlapping [`AsyncStream`] every boundary is a semaphore wait, a begin-flag
//! wait kernel and a launch; on [`AsyncStream::serial`] an ordinary stream boundary. The
//! time per link of a graph replay is the cost of one boundary plus a trivial kernel.

use crate::protocol::relay;
use megaops::{AsyncStream, Device, DynChunks, Error, Result, Tensor, Tiled};
use std::fmt;

/// Elements each CTA of [`relay`] handles (its kernel tile).
pub const ELEMENTS_PER_CTA: u32 = 128;

/// The shape of a [`Chain`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainShape {
    /// CTAs per kernel (each handles [`ELEMENTS_PER_CTA`] elements).
    pub ctas: u32,
    /// Data tiles per tensor: 1 is one semaphore that every CTA of the producer signals;
    /// `ctas` is one per producer CTA, all of which every consumer CTA waits for. Must
    /// divide the tensor's `ctas · 128` elements.
    pub tiles: u32,
    /// Kernels in the chain.
    pub links: usize,
}

impl fmt::Display for ChainShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} links of {} CTAs, {} data tile(s) per tensor",
            self.links, self.ctas, self.tiles
        )
    }
}

/// The chain's tensors: a complete input and one `Tiled` output per link.
pub struct Chain {
    shape: ChainShape,
    input: Tensor<f32>,
    links: Vec<Tiled<f32, DynChunks>>,
    runs: u64,
}

impl Chain {
    /// The tensors of a chain of `shape`, the input holding `e % 7` and every output
    /// poisoned. Refuses a shape with no CTAs or links, or whose tiles do not divide the
    /// elements, before allocating anything.
    pub fn new(device: &Device, shape: ChainShape) -> Result<Chain> {
        let ChainShape { ctas, tiles, links } = shape;
        let n = ctas
            .checked_mul(ELEMENTS_PER_CTA)
            .ok_or_else(|| Error::Invalid(format!("chain of {shape}: {ctas} CTAs overflow the u32 elements")))?;
        if ctas == 0 || links == 0 {
            return Err(Error::Invalid(format!(
                "chain of {shape}: needs at least one CTA and one link"
            )));
        }
        if tiles == 0 || !n.is_multiple_of(tiles) {
            return Err(Error::Invalid(format!(
                "chain of {shape}: {tiles} data tiles do not divide the {n} elements"
            )));
        }
        let values: Vec<f32> = (0..n).map(|e| (e % 7) as f32).collect();
        let input = Tensor::from_slice(device, &[n as usize], &values)?;
        let links = (0..links)
            .map(|i| Tiled::new(device, &[n as usize], DynChunks(n / tiles), &format!("link{i}")))
            .collect::<Result<Vec<_>>>()?;
        let chain = Chain {
            shape,
            input,
            links,
            runs: 0,
        };
        chain.poison()?;
        Ok(chain)
    }

    /// The shape.
    pub fn shape(&self) -> ChainShape {
        self.shape
    }

    /// Overwrites every link's output with NaNs.
    pub fn poison(&self) -> Result<()> {
        self.links.iter().try_for_each(|t| t.tensor().fill(f32::NAN))
    }

    /// Enqueues the chain on `on`, each kernel spinning `spin_ns` after its input wait.
    /// Re-arms the links first when an earlier run produced them (also inside a graph
    /// capture).
    pub fn run(&mut self, on: &AsyncStream, spin_ns: u64) -> Result<()> {
        self.run_spinning(on, 0, spin_ns)
    }

    /// [`Chain::run`] with each kernel also spinning `pre_spin_ns` before its input wait
    /// (work that does not depend on the link before).
    pub fn run_spinning(&mut self, on: &AsyncStream, pre_spin_ns: u64, spin_ns: u64) -> Result<()> {
        if self.runs > 0 {
            self.links.iter_mut().for_each(Tiled::rearm);
        }
        let n = self.shape.ctas * ELEMENTS_PER_CTA;
        let (first, rest) = self
            .links
            .split_first_mut()
            .ok_or_else(|| Error::Invalid("a chain without links".into()))?;
        relay::launch(on, &self.input, first, n, pre_spin_ns, spin_ns)?;
        let mut prev = first;
        for next in rest {
            relay::launch(on, prev, next, n, pre_spin_ns, spin_ns)?;
            prev = next;
        }
        self.runs += 1;
        Ok(())
    }

    /// The elements of the last link that differ from `input + links` (after the queued
    /// work finishes): zero for a correct run.
    pub fn mismatches(&self) -> Result<usize> {
        let last = self
            .links
            .last()
            .ok_or_else(|| Error::Invalid("a chain without links".into()))?;
        let want = self.links.len() as f32;
        let input = self.input.to_vec()?;
        let got = last.to_vec()?;
        Ok(input.iter().zip(&got).filter(|(x, y)| **x + want != **y).count())
    }
}
