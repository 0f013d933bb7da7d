//! Owns running one function over many items on every CPU, results in the items' order.

/// `f` of every item, in the items' order, computed on up to one thread per CPU (items
/// taken in turn, so one large item does not hold up the rest).
pub fn parallel_map<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if threads <= 1 {
        return items.into_iter().map(f).collect();
    }
    let n = items.len();
    let queue = std::sync::Mutex::new(items.into_iter().enumerate());
    let mut out: Vec<(usize, R)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        // A worker that panicked poisons the queue; its panic is re-raised
                        // by join below, so the others only need to stop.
                        let next = match queue.lock() {
                            Ok(mut q) => q.next(),
                            Err(_) => None,
                        };
                        let Some((i, item)) = next else { break };
                        done.push((i, f(item)));
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    debug_assert_eq!(out.len(), n);
    out.sort_unstable_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_items_order_whatever_thread_ran_them() {
        // Items of very different cost, so workers finish out of order.
        let items: Vec<u64> = (0..200).collect();
        let out = parallel_map(items, |i| {
            if i % 7 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            i * 3
        });
        assert_eq!(out, (0..200).map(|i| i * 3).collect::<Vec<_>>());
    }

    #[test]
    fn no_items_and_one_item() {
        assert!(parallel_map(Vec::<u8>::new(), |x| x).is_empty());
        assert_eq!(parallel_map(vec![5], |x| x + 1), vec![6]);
    }

    #[test]
    fn a_panicking_item_reaches_the_caller() {
        let r = std::panic::catch_unwind(|| {
            parallel_map((0..64).collect::<Vec<u32>>(), |i| {
                assert!(i != 40, "item 40");
                i
            })
        });
        assert!(r.is_err());
    }
}
