//! Everything a compile carries over from the previous snapshot, one [`Kept`] table per kind
//! (`io/kept.rs` says how a table carries its entries).

use crate::io::kept::Kept;

/// Everything a compile carries over, by kind.
#[derive(Default)]
pub struct Carried {
    pub servers: Kept<crate::servers::health::ServerState>,
    pub entrypoints:
        Kept<crate::observe::metrics::PerWorker<crate::observe::metrics::EntrypointCells>>,
    pub routes: Kept<crate::observe::metrics::PerWorker<crate::observe::metrics::RouteCells>>,
    pub services: Kept<crate::observe::metrics::PerWorker<crate::observe::metrics::ServiceCells>>,
    /// TCP and UDP services' counts, by transport and name.
    pub l4: Kept<crate::observe::metrics::PerWorker<crate::observe::metrics::L4Cells>>,
    pub caches: Kept<crate::actions::cache::store::Store>,
    pub clusters: Kept<crate::actions::elasticsearch::routing::ClusterView>,
    pub spools: Kept<crate::actions::elasticsearch::spool::Spool>,
    pub search_caches: Kept<crate::actions::elasticsearch::search_cache::SearchCache>,
    /// Middlewares by name and configuration: an unchanged one keeps its state (rate-limit
    /// buckets, requests in flight, verified passwords).
    pub filters: Kept<crate::middlewares::Filter>,
    /// Circuit breakers, one per router that names one, by router, place, name and
    /// configuration.
    pub breakers: Kept<crate::middlewares::Breaker>,
}

impl Carried {
    pub fn carrying(previous: Option<&Carried>) -> Carried {
        Carried {
            servers: Kept::carrying(previous.map(|p| &p.servers)),
            entrypoints: Kept::carrying(previous.map(|p| &p.entrypoints)),
            routes: Kept::carrying(previous.map(|p| &p.routes)),
            services: Kept::carrying(previous.map(|p| &p.services)),
            l4: Kept::carrying(previous.map(|p| &p.l4)),
            caches: Kept::carrying(previous.map(|p| &p.caches)),
            clusters: Kept::carrying(previous.map(|p| &p.clusters)),
            spools: Kept::carrying(previous.map(|p| &p.spools)),
            search_caches: Kept::carrying(previous.map(|p| &p.search_caches)),
            filters: Kept::carrying(previous.map(|p| &p.filters)),
            breakers: Kept::carrying(previous.map(|p| &p.breakers)),
        }
    }

    pub fn finish(self) -> Carried {
        Carried {
            servers: self.servers.finish(),
            entrypoints: self.entrypoints.finish(),
            routes: self.routes.finish(),
            services: self.services.finish(),
            l4: self.l4.finish(),
            caches: self.caches.finish(),
            clusters: self.clusters.finish(),
            spools: self.spools.finish(),
            search_caches: self.search_caches.finish(),
            filters: self.filters.finish(),
            breakers: self.breakers.finish(),
        }
    }
}
