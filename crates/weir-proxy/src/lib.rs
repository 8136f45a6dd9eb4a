pub mod h1;
pub mod router;
