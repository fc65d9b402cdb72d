//! Reading values out of datums where pg_worlds needs them as Rust values: an integer key, an array's
//! elements. No room of pg_worlds below it: every room may use it.
use pgrx::pg_sys;

/// An int2, int4 or int8 datum as an i64; None for another type.
pub fn integer_of(typ: pg_sys::Oid, d: pg_sys::Datum) -> Option<i64> {
    match typ {
        pg_sys::INT2OID => Some(d.value() as i16 as i64),
        pg_sys::INT4OID => Some(d.value() as i32 as i64),
        pg_sys::INT8OID => Some(d.value() as i64),
        _ => None,
    }
}

/// The non-null elements of an array datum, and their type.
///
/// # Safety
/// `d` is an array datum.
pub unsafe fn array_elements(d: pg_sys::Datum) -> (pg_sys::Oid, Vec<pg_sys::Datum>) {
    unsafe {
        let array = pg_sys::pg_detoast_datum(d.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let elem = (*array).elemtype;
        let (mut len, mut by_val, mut align) = (0i16, false, 0 as std::ffi::c_char);
        pg_sys::get_typlenbyvalalign(elem, &mut len, &mut by_val, &mut align);
        let (mut values, mut nulls, mut count) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
        pg_sys::deconstruct_array(array, elem, len as i32, by_val, align, &mut values, &mut nulls, &mut count);
        let elements = (0..count as usize).filter(|&i| !*nulls.add(i)).map(|i| *values.add(i)).collect();
        (elem, elements)
    }
}
